//! Command-line grammar (clap). Parsing only; the commands live in src/cli/commands.rs.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use kbdb::daemon::params::{Retrieval, SearchMode};

const EXAMPLES: &str = "\
Examples:
  kbdb init                                   create ./.kbdb
  kbdb learn \"We chose Postgres for JSONB\" --title \"Database choice\" --tag adr
  kbdb learn --file notes.md --docid notes/today
  kbdb learn --file diagram.png --title \"Architecture diagram\"
  echo '{\"content\":\"a fact\",\"tags\":[\"x\"]}' | kbdb learn --jsonl
  kbdb retrieve --kbid 5ks4vejzp2hgw9q87cncbef2kr
  kbdb retrieve --docid notes/today --format json
  kbdb recall 5ks4vejzp2hgw9q87cncbef2kr --depth 2
  kbdb content notes/today > today.md
  kbdb unlearn 5ks4vejzp2hgw9q87cncbef2kr
  kbdb status
  KBDB_DIR=~/kb kbdb status                   use another database

Exit codes: 0 ok, 1 internal or storage error, 2 usage error, 3 invalid input,
4 not found, 5 database unavailable (missing, not a folder, in use), 6 some --jsonl lines failed,
7 check found errors, 9 damaged database (run `kbdb check`).";

#[derive(Debug, Parser)]
#[command(
    name = "kbdb",
    version,
    about = "A local knowledge base for AI agents and the people who work with them",
    long_about = "A local knowledge base for AI agents and the people who work with them.\n\n\
Learn facts, decisions, code and images as content-addressed sections grouped into documents; \
retrieve them by id. The database is a folder (default ./.kbdb).",
    after_help = EXAMPLES
)]
pub struct Cli {
    /// Database folder [default: ./.kbdb]
    #[arg(long, global = true, env = "KBDB_DIR", value_name = "DIR")]
    pub db: Option<PathBuf>,

    /// Output format: text for people, json for programs (the spec's result objects)
    #[arg(long, global = true, value_enum, default_value_t = Format::Text)]
    pub format: Format,

    /// Open the database in this process instead of through its daemon (for scripts that
    /// want no background process; fails while a daemon holds the database). KBDB_EMBEDDED=1
    /// (or true/yes/on) does the same; 0, false, no, off or empty do not
    #[arg(
        long,
        global = true,
        env = "KBDB_EMBEDDED",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::FalseyValueParser::new()
    )]
    pub embedded: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a knowledge base (./.kbdb, or --db DIR)
    Init,

    /// Store a section: text, code, JSON or an image
    #[command(after_help = "\
Examples:
  kbdb learn \"Deploys happen on Tuesdays\" --title \"Deploy day\" --tag process
  kbdb learn --file src/lib.rs --type text/x-rust --docid code/lib
  kbdb learn --file logo.png --title Logo          (type inferred: image/png)
  kbdb learn \"Deploys happen on Wednesdays\" --title \"Deploy day\" --tag process --replace
  kbdb learn --file docs/adr-7.md --docid adr/7 --split   (one section per heading)
  cat facts.jsonl | kbdb learn --jsonl             (one learn object per line)

A --jsonl line is an object with the fields content, type, title, description, docid,
tags, replace and source; one result line is printed per input line as soon as it is durable.")]
    Learn(LearnArgs),

    /// Remove a section (and its memberships, tags and source key)
    Unlearn {
        /// kbid of the section
        kbid: String,
    },

    /// Fetch a section's content by kbid, or a document record by docid
    Retrieve {
        #[arg(long)]
        kbid: Option<String>,
        #[arg(long)]
        docid: Option<String>,
    },

    /// Search sections (all words must match; falls back to any word)
    #[command(after_help = "\
Examples:
  kbdb search \"deploy day\"
  kbdb search parseConfigFile --type text/x-rust
  kbdb search '\"exact phrase\" other words' --limit 5 --offset 5
  kbdb search postgres --mode documents
  kbdb search postgres --mode stats --format json
  kbdb search migration --tag adr --docid adr/database --content")]
    Search(SearchArgs),

    /// Manage query-time synonyms
    Synonyms {
        #[command(subcommand)]
        action: SynonymsAction,
    },

    /// Read sections with their context: documents, references, siblings (depth 0-3)
    #[command(after_help = "\
Depth: 0 the section (content, heading, type, docids); 1 + its documents' manifests and the
sections that reference it; 2 + its own references and the full text of sibling sections;
3 + the full text of what it references, with their back-references.

Examples:
  kbdb recall 5ks4vejzp2hgw9q87cncbef2kr --depth 1
  kbdb recall KBID1 KBID2 --depth 3 --max-chars 20000 --format json")]
    Recall {
        /// kbids of the sections (one gives an object in JSON, several an array)
        #[arg(required = true, value_name = "KBID")]
        kbids: Vec<String>,
        /// Expansion depth, 0-3 (larger values are clamped to 3)
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        depth: i64,
        /// Stop expanding before the result exceeds this many characters of JSON
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        max_chars: Option<i64>,
    },

    /// Compose markdown from kbids and docids (documents render as their sections in order)
    Content {
        /// kbids and/or docids, in the order to render
        #[arg(required = true)]
        ids: Vec<String>,
    },

    /// List documents: docid, title, section count, last update
    Docs,

    /// Show database status and counts
    Status,

    /// Verify integrity: checksums, types, orphans, references, source keys, the index
    #[command(after_help = "Exit code 7 when errors are found (warnings alone exit 0).")]
    Check,

    /// Remove sections no document holds (sections learned on their own are kept)
    Gc,

    /// Rebuild the lexical index from the store
    Rebuild,

    /// Write a snapshot as plain files (sections, documents, catalog) for backup or migration
    #[command(after_help = "\
The layout is described in docs/file-layout.md. The snapshot is consistent (one read
transaction) and appears at PATH only when complete (written beside it, then renamed).

Examples:
  kbdb export backup/kb-2026-11-30
  kbdb export backup/kb --with-indexes --force")]
    Export {
        /// Destination folder
        #[arg(default_value = "kbdb-export")]
        path: PathBuf,
        /// Also write indexes/ (terms, positions, corpus, references; vectors when present)
        #[arg(long)]
        with_indexes: bool,
        /// Replace an earlier kbdb export at PATH (recognised by its catalog.toml; any other
        /// non-empty folder is refused)
        #[arg(long)]
        force: bool,
    },

    /// Read a plain-file layout (an export) into this database, creating it if needed
    #[command(after_help = "\
Every entry is verified (checksum, kbid, type, paths); bad ones are reported and skipped,
or with --strict the import stops at the first and writes nothing.")]
    Import {
        /// The folder holding catalog.toml, sections/ and documents/
        path: PathBuf,
        /// Stop at the first bad entry (nothing is written)
        #[arg(long)]
        strict: bool,
    },

    /// Turn a folder in the plain-file layout into a database (in place, or into --db)
    #[command(after_help = "\
In place (no --db), the plain files move into OLD_DIR/plain-layout-<time>/ once the database
holds them; with --db NEW the old folder is left untouched.")]
    Migrate {
        /// Folder in the plain-file layout
        old_dir: PathBuf,
    },

    /// Collection models: load a TOML file of models, or show the loaded ones
    #[command(after_help = "\
Examples:
  kbdb models load models.toml     (checked first: an invalid file changes nothing)
  kbdb models show                 (the TOML; --format json adds the schema)

The format is in docs/collections.md.")]
    Models {
        #[command(subcommand)]
        action: ModelsAction,
    },

    /// Query documents by model and metadata
    #[command(after_help = "\
Examples:
  kbdb query --model Story --where '{\"status\": \"ready\", \"points\": {\"$gte\": 3}}'
  kbdb query --model Story --sort -meta.points --limit 5
  kbdb query --model Epic --method count
  kbdb query --json '{\"model\": \"Story\", \"where\": [{\"path\": \"meta.tags\", \"operator\": \"contains\", \"value\": \"auth\"}]}'

Operators: $eq $neq $in $notIn $gt $lt $gte $lte $contains $startsWith $endsWith $regex $exists
notExists (docs/collections.md).")]
    Query(QueryArgs),

    /// Validate documents against their models (one docid, a model, or all); exit 7 when any
    /// document has errors
    Validate {
        /// A docid, a model name, or `all` (default)
        target: Option<String>,
    },

    /// Create, update, edit a section of, show or delete a collection document
    Doc {
        #[command(subcommand)]
        action: DocAction,
    },

    /// Skills: reusable prompt templates with {{argument}} placeholders (MCP prompts)
    Skill {
        #[command(subcommand)]
        action: SkillAction,
    },

    /// Agents: a persona with an ordered list of skills (MCP prompts `agent:<name>`)
    Agent {
        #[command(subcommand)]
        action: AgentAction,
    },

    /// Serve the knowledge base to an AI agent over MCP (stdio); needs --db or KBDB_DIR
    #[command(after_help = "\
The database comes from --db, else KBDB_DIR; never from the working directory (a host
application chooses it). stdout carries only MCP JSON-RPC. See docs/mcp.md for wiring
Claude Code, Claude Desktop and other clients.

With --watch DIR, the server also keeps the folder DIR in sync (like `kbdb watch DIR`): edits
saved in an editor reach the knowledge base, and subscribed clients are notified.

Examples:
  claude mcp add kbdb -- kbdb mcp --db /home/me/project/.kbdb
  kbdb mcp --db /home/me/notes/.kbdb --watch /home/me/notes --prefix notes/")]
    Mcp(McpArgs),

    /// Serve MCP over streamable HTTP at /mcp, for a team (bearer tokens; see docs/serve.md)
    #[command(after_help = "\
Every request needs Authorization: Bearer TOKEN (kbdb token create NAME). Listens on loopback
by default; a non-loopback --listen is warned about (use --tls-cert/--tls-key or a reverse
proxy). Limits and allowed origins: [serve] in worker.toml. Stops on SIGTERM or ctrl-c.

Examples:
  kbdb token create alice
  kbdb serve --db /srv/kb/.kbdb
  kbdb serve --listen 0.0.0.0:7411 --tls-cert cert.pem --tls-key key.pem
  claude mcp add --transport http kbdb http://127.0.0.1:7411/mcp --header \"Authorization: Bearer TOKEN\"")]
    Serve(super::serve::ServeArgs),

    /// Manage the bearer tokens of `kbdb serve`
    Token {
        #[command(subcommand)]
        action: super::serve::TokenAction,
    },

    /// Sync a folder of markdown files into documents (once; `kbdb watch` keeps syncing)
    #[command(after_help = "\
Every .md/.mdx file of DIR (not hidden, not excluded by .gitignore/.ignore) becomes the
document PREFIX + its path without the extension; front matter becomes its metadata. Unchanged
files are skipped, a removed file removes its document. Edits through kbdb (doc update, doc
section, doc create under PREFIX, doc delete) are written back to the files. See docs/sync.md.

Examples:
  kbdb sync ~/notes --prefix notes/
  kbdb sync ~/notes                 (again: only what changed; the prefix is remembered)
  kbdb sync --list
  kbdb sync ~/notes --forget        (stop syncing; the documents stay)")]
    Sync(SyncArgs),

    /// Sync a folder, then keep it in sync on every change until stopped (Ctrl-C)
    #[command(after_help = "\
A change saved in an editor is searchable within about a second. Prints one line per change
(--format json: one sync report per line). See docs/sync.md.

Example:
  kbdb watch ~/notes --prefix notes/")]
    Watch(WatchArgs),

    /// The worker daemon that serves a database to every client (started on demand)
    #[command(after_help = "\
Clients start the daemon when none answers; it exits after daemon.idle_timeout_secs without
clients (default 300) and logs to daemon.log in the database folder. See docs/daemon.md.

Examples:
  kbdb daemon            run it in the foreground
  kbdb daemon status     is one running? (pid, version)
  kbdb daemon stop")]
    Daemon {
        #[command(subcommand)]
        action: Option<DaemonAction>,
    },

    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// Also keep this folder of markdown files in sync (as `kbdb watch DIR` does)
    #[arg(long, value_name = "DIR")]
    pub watch: Option<PathBuf>,
    /// Docid prefix of the watched folder's documents (default: its current one)
    #[arg(long, requires = "watch")]
    pub prefix: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct SyncArgs {
    /// The folder of markdown files
    #[arg(required_unless_present = "list")]
    pub dir: Option<PathBuf>,
    /// Docid prefix of its documents, e.g. notes/ (default: the folder's current prefix; none
    /// the first time)
    #[arg(long, conflicts_with_all = ["list", "forget"])]
    pub prefix: Option<String>,
    /// List the synced folders
    #[arg(long, conflicts_with_all = ["dir", "forget"])]
    pub list: bool,
    /// Stop syncing DIR: its documents stay, no longer tied to its files
    #[arg(long)]
    pub forget: bool,
}

#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// The folder of markdown files
    pub dir: PathBuf,
    /// Docid prefix of its documents (default: the folder's current prefix; none the first
    /// time)
    #[arg(long)]
    pub prefix: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum SkillAction {
    /// Store a skill (a skill of the same name is replaced)
    #[command(
        after_help = "Example:\n  kbdb skill learn review-file --description \"Review a file\" --body \"Review {{file}} for {{focus}}\""
    )]
    Learn {
        /// kebab-case name
        name: String,
        #[arg(long)]
        description: String,
        /// Template text; omit to read --file or standard input
        #[arg(long)]
        body: Option<String>,
        /// Read the body from a file ('-' for standard input)
        #[arg(long, conflicts_with = "body")]
        file: Option<PathBuf>,
    },
    /// List skills
    List,
    /// Show a skill by name (or --kbid)
    Get {
        name: Option<String>,
        #[arg(long)]
        kbid: Option<String>,
    },
    /// Delete a skill by kbid
    Delete { kbid: String },
}

#[derive(Debug, Subcommand)]
pub enum AgentAction {
    /// Create (or replace) the agent `agent-<name>`
    Create {
        /// kebab-case name
        name: String,
        #[arg(long)]
        description: String,
        #[arg(long)]
        persona: String,
        /// Skill kbid, in order (repeat)
        #[arg(long = "skill", value_name = "KBID")]
        skills: Vec<String>,
    },
    /// List agents
    List,
    /// Show an agent with its skills
    Get { docid: String },
    /// Delete an agent (its skills stay)
    Delete { docid: String },
}

#[derive(Debug, Subcommand)]
pub enum DaemonAction {
    /// Run the daemon in the foreground (what clients start)
    Run,
    /// Whether a daemon serves the database: pid, version, build
    Status,
    /// Ask the daemon to finish its work and stop
    Stop,
}

#[derive(Debug, clap::Args)]
pub struct LearnArgs {
    /// The content; '-' or omitted: read --file or standard input
    pub content: Option<String>,

    /// Read the content from a file ('-' for standard input)
    #[arg(long, value_name = "PATH", conflicts_with = "content")]
    pub file: Option<PathBuf>,

    /// MIME type: text/markdown (default), text/*, application/json, image/*
    #[arg(long = "type", value_name = "MIME")]
    pub section_type: Option<String>,

    /// Section title (required for images)
    #[arg(long)]
    pub title: Option<String>,

    #[arg(long)]
    pub description: Option<String>,

    /// Group the section under this document id
    #[arg(long)]
    pub docid: Option<String>,

    /// Tag (repeat for several)
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,

    /// Supersede the section with the same source key
    #[arg(long)]
    pub replace: bool,

    /// Explicit source key (default: DOCID#TITLE)
    #[arg(long)]
    pub source: Option<String>,

    /// Store markdown as the document --docid, one section per heading (re-learning an edited
    /// file keeps the kbids of unchanged sections); --tag tags every section
    #[arg(long, conflicts_with_all = ["section_type", "description", "replace", "source"])]
    pub split: bool,

    /// Read one JSON learn object per line of standard input
    #[arg(long, conflicts_with_all = ["content", "file", "section_type", "title", "description", "docid", "tags", "replace", "source", "split"])]
    pub jsonl: bool,
}

#[derive(Debug, clap::Args)]
pub struct SearchArgs {
    /// The query: words, \"quoted phrases\", identifiers; any text is accepted. Several
    /// arguments are one query, joined by spaces (`kbdb search sqlite edge`)
    #[arg(required = true, num_args = 1.., value_name = "QUERY")]
    pub query: Vec<String>,
    /// sections (default), documents (grouped per document) or stats (counts); or a retrieval
    /// path: lexical, vector, hybrid (vector and hybrid need an embedding provider)
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(SearchMode::NAMES))]
    pub mode: Option<String>,
    /// The retrieval path: lexical (default, BM25F), vector (embeddings) or hybrid (both, fused
    /// by reciprocal rank); must agree with a retrieval path given in --mode
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(Retrieval::NAMES))]
    pub search_mode: Option<String>,
    /// Results per page (1-100, default 20)
    #[arg(long)]
    pub limit: Option<usize>,
    /// Results to skip (paging)
    #[arg(long)]
    pub offset: Option<usize>,
    /// Include each section's full text
    #[arg(long)]
    pub content: bool,
    /// Only sections with this tag (repeat: all of them)
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// Only sections of this type
    #[arg(long = "type", value_name = "MIME")]
    pub section_type: Option<String>,
    /// Only sections of this document
    #[arg(long)]
    pub docid: Option<String>,
    /// Only sections of documents of this model (collections)
    #[arg(long)]
    pub model: Option<String>,
    /// Only sections of documents whose metadata matches, as JSON (the `query` where)
    #[arg(long = "where", value_name = "JSON")]
    pub where_: Option<String>,
    /// vector and hybrid: the least cosine similarity (-1 to 1) for a section found by its
    /// meaning (default 0.15; 0 or -1 lists every section)
    #[arg(long, value_name = "SIMILARITY", allow_negative_numbers = true)]
    pub min_score: Option<f32>,
}

#[derive(Debug, Subcommand)]
pub enum ModelsAction {
    /// Replace the models with those of a TOML file
    Load {
        /// The models file
        file: std::path::PathBuf,
    },
    /// Print the loaded models
    Show,
}

#[derive(Debug, clap::Args)]
pub struct QueryArgs {
    /// Only documents of this model
    #[arg(long)]
    pub model: Option<String>,
    /// Conditions as JSON: an object ({"status": "ready"}) or an array of {path, operator, value}
    #[arg(long = "where", value_name = "JSON")]
    pub where_: Option<String>,
    /// Sort keys: meta.points, -meta.points (descending); repeat for more
    #[arg(long)]
    pub sort: Vec<String>,
    #[arg(long)]
    pub limit: Option<usize>,
    #[arg(long)]
    pub offset: Option<usize>,
    /// fetchAll (default), first, last or count
    #[arg(long)]
    pub method: Option<String>,
    /// What else to include, as JSON: {"sections": ["Acceptance Criteria"], "related": ["epic"]}
    #[arg(long, value_name = "JSON")]
    pub select: Option<String>,
    /// The whole query as JSON (the MCP `query` input); other flags are added to it
    #[arg(long, value_name = "JSON")]
    pub json: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum DocAction {
    /// Create a document scaffolded from its model (docid: the model's folder + the title's slug)
    Create {
        #[arg(long)]
        model: String,
        #[arg(long)]
        title: String,
        /// Metadata as a JSON object, merged over the model's defaults
        #[arg(long, value_name = "JSON")]
        meta: Option<String>,
        /// The markdown body (instead of the scaffold)
        #[arg(long, conflicts_with = "file", allow_hyphen_values = true)]
        content: Option<String>,
        /// Read the body from a file
        #[arg(long)]
        file: Option<std::path::PathBuf>,
        /// The docid to use
        #[arg(long)]
        docid: Option<String>,
    },
    /// Merge metadata into a document and/or replace its body or title
    Update {
        docid: String,
        /// Metadata to merge, as a JSON object (a null value removes the key)
        #[arg(long, value_name = "JSON")]
        meta: Option<String>,
        #[arg(long, conflicts_with = "file", allow_hyphen_values = true)]
        content: Option<String>,
        #[arg(long)]
        file: Option<std::path::PathBuf>,
        #[arg(long)]
        title: Option<String>,
    },
    /// Edit one section by its heading: replace, append, remove, insert_before, insert_after
    Section {
        docid: String,
        /// The heading text (case-insensitive)
        heading: String,
        #[arg(long, value_parser = ["replace", "append", "remove", "insert_before", "insert_after"])]
        action: String,
        #[arg(long, conflicts_with = "file", allow_hyphen_values = true)]
        content: Option<String>,
        #[arg(long)]
        file: Option<std::path::PathBuf>,
        /// Which one, when the heading appears more than once (1-based)
        #[arg(long)]
        occurrence: Option<usize>,
    },
    /// Show a document: metadata, model, outline and content
    Show { docid: String },
    /// Delete a document (its sections leave with it, unless held elsewhere or learned on their own)
    Delete { docid: String },
}

#[derive(Debug, Subcommand)]
pub enum SynonymsAction {
    /// Make TERM and each SYNONYM match each other: `kbdb synonyms add k8s kubernetes`
    Add {
        term: String,
        #[arg(required = true)]
        synonyms: Vec<String>,
    },
    /// List user synonyms
    List,
    /// Remove synonyms of TERM (all of them when none are given)
    Remove { term: String, synonyms: Vec<String> },
}
