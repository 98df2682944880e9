// The official TypeScript MCP SDK (@modelcontextprotocol/sdk) against `kbdb serve` over
// streamable HTTP.
//
// Usage: node ts_client.mjs URL READ_ONLY_TOKEN [SDK_HOME]
// SDK_HOME (default $MCP_CHECK_HOME, else ~/.cache/kbdb-mcp-check) holds node_modules with the
// SDK. Opens a session with the token, lists the tools, searches (the database holds a section
// titled "Deploy day"), sees a learn refused as read-only, then sees a wrong token refused.
// Prints OK and exits 0 when every step went as expected; else prints what failed, exits 1.
import { join } from "node:path";
import { homedir } from "node:os";
import { pathToFileURL } from "node:url";

const [url, token, sdkHome] = process.argv.slice(2);
const home = sdkHome || process.env.MCP_CHECK_HOME || join(homedir(), ".cache/kbdb-mcp-check");
const sdk = (p) => import(pathToFileURL(join(home, "node_modules/@modelcontextprotocol/sdk/dist/esm", p)).href);
const { Client } = await sdk("client/index.js");
const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");

function check(cond, what) {
  if (!cond) throw new Error(what);
}

async function connect(bearer) {
  const client = new Client({ name: "kbdb-serve-test", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${bearer}` } },
  });
  await client.connect(transport);
  return { client, transport };
}

try {
  const { client, transport } = await connect(token);
  const tools = (await client.listTools()).tools.map((t) => t.name);
  check(["search", "learn", "recall"].every((n) => tools.includes(n)), `tools: ${tools}`);
  const found = await client.callTool({ name: "search", arguments: { query: "deploy" } });
  check(!found.isError && found.content[0].text.includes("Deploy day"), JSON.stringify(found));
  const refused = await client.callTool({ name: "learn", arguments: { content: "x", title: "y" } });
  check(refused.isError && refused.content[0].text.includes("read-only"), JSON.stringify(refused));
  await transport.terminateSession();
  await client.close();

  let wrongRefused = false;
  try {
    const c = await connect("kbdb_not_a_token");
    await c.client.close();
  } catch (e) {
    wrongRefused = /401|Unauthorized/i.test(String(e)) || e?.code === 401;
    if (!wrongRefused) throw new Error(`wrong token failed otherwise: ${e}`);
  }
  check(wrongRefused, "a wrong token opened a session");
  console.log("OK typescript sdk");
  process.exit(0);
} catch (e) {
  console.log(`FAIL ${e?.stack || e}`);
  process.exit(1);
}
