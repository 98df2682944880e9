#!/usr/bin/env python3
"""A loopback proxy that adds `Authorization: Bearer TOKEN` to every request it forwards.

For clients that cannot send a header of their own, such as the MCP conformance suite's
`server --url` mode (used by mcp-check's check-server.sh --url):

    auth_proxy.py --listen 127.0.0.1:PORT --to http://127.0.0.1:7411 --token-file FILE

Every other header (Host and Origin included, so DNS-rebinding checks still reach the server
as sent) and the body pass through unchanged; responses are streamed back as they arrive
(server-sent events included), each connection closed after its response. Listens on loopback
only, prints "listening on http://ADDR:PORT" once ready, runs until killed.
"""
import argparse
import http.client
import socketserver
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade",
       "transfer-encoding", "authorization"}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--listen", default="127.0.0.1:0")
    p.add_argument("--to", required=True, help="the server, e.g. http://127.0.0.1:7411")
    p.add_argument("--token-file", required=True)
    a = p.parse_args()
    token = open(a.token_file).read().strip()
    target = urllib.parse.urlsplit(a.to)
    host, port = a.listen.rsplit(":", 1)
    if host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("auth_proxy listens on loopback only")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def forward(self):
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else None
            conn = http.client.HTTPConnection(target.hostname, target.port, timeout=300)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            headers["Authorization"] = f"Bearer {token}"
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for k, v in headers.items():
                conn.putheader(k, v)
            conn.endheaders(body)
            resp = conn.getresponse()
            self.send_response_only(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() not in HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            try:
                while True:
                    chunk = resp.read1(65536)
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                conn.close()

        do_GET = do_POST = do_DELETE = do_PUT = do_OPTIONS = forward

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        address_family = socketserver.socket.AF_INET6 if ":" in host else socketserver.socket.AF_INET

    srv = Server((host, int(port)), Handler)
    print(f"listening on http://{host}:{srv.server_address[1]}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
