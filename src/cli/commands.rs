//! One function per command: open the database, call `Kb`, print the result.

use std::path::PathBuf;

use clap::CommandFactory;
use kbdb::daemon::operations::op;
use kbdb::daemon::params::{IdsParams, NoParams, RetrieveParams, SynonymsParams, UnlearnParams};
use kbdb::search::{Retrieval, SearchMode};
use kbdb::{KbError, Retrieved};

use super::args::{Cli, Command, DaemonAction, Format, SearchArgs, SynonymsAction};
use super::backend::Backend;
use super::output::{EXIT_OK, print_json, print_text, report_error};

/// Default database folder for people: `.kbdb` in the working directory.
pub const DEFAULT_DB: &str = ".kbdb";

pub fn dispatch(cli: Cli) -> i32 {
    let format = cli.format;
    let explicit_db = cli.db.clone();
    let embedded = cli.embedded;
    let open = |db: &std::path::Path| Backend::open(db, embedded, false).map(|(b, _)| b);
    let db = cli.db.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_DB));
    let result = match cli.command {
        Command::Completions { shell } => {
            // Into a buffer: clap_complete panics when its writer fails (`| head -1`).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "kbdb", &mut script);
            super::output::print_bytes(&script);
            Ok(EXIT_OK)
        }
        Command::Init => init(&db, format),
        Command::Learn(args) => super::learn::run(&db, format, embedded, args),
        Command::Daemon { action } => daemon(&db, format, action),
        Command::Models { action } => {
            open(&db).and_then(|kb| super::collections::models(&kb, format, action))
        }
        Command::Query(a) => open(&db).and_then(|kb| super::collections::query(&kb, format, a)),
        Command::Validate { target } => {
            open(&db).and_then(|kb| super::collections::validate(&kb, format, target))
        }
        Command::Doc { action } => open(&db).and_then(|kb| super::collections::doc(&kb, format, action)),
        Command::Skill { action } => open(&db).and_then(|kb| super::skills::skill(&kb, format, action)),
        Command::Agent { action } => open(&db).and_then(|kb| super::skills::agent(&kb, format, action)),
        Command::Sync(a) => super::sync::sync(&db, format, embedded, a),
        Command::Watch(a) => super::sync::watch(&db, format, embedded, a),
        Command::Serve(a) => super::serve::serve(&db, format, a),
        Command::Token { action } => super::serve::token(&db, format, action),
        Command::Mcp(m) => match &explicit_db {
            None => Err(KbError::invalid(
                "db",
                "kbdb mcp needs --db PATH or KBDB_DIR (it never uses the working directory)",
            )),
            Some(dir) => {
                // Create the database when missing, so a freshly wired agent can start learning.
                let create = if dir.join(kbdb::store::DB_FILE).exists() {
                    Ok(())
                } else {
                    kbdb::Kb::open_or_create(dir).map(drop)
                };
                let watch = m.watch.map(|dir| kbdb::mcp::WatchSpec {
                    dir,
                    prefix: m.prefix,
                });
                create
                    .and_then(|_| kbdb::mcp::run_watching(dir, watch))
                    .map(|_| EXIT_OK)
            }
        },
        Command::Unlearn { kbid } => open(&db).and_then(|kb| {
            let r = kb.run(op::UNLEARN, &UnlearnParams { kbid: kbid.clone() })?;
            match format {
                Format::Json => print_json(&r, false),
                Format::Text if r.removed => print_text(&format!("removed {kbid}")),
                Format::Text => print_text(&format!(
                    "{kbid} was not in the knowledge base; nothing removed"
                )),
            }
            Ok(EXIT_OK)
        }),
        Command::Retrieve { kbid, docid } => open(&db).and_then(|kb| {
            let r = kb.run(op::RETRIEVE, &RetrieveParams { kbid, docid })?;
            match format {
                Format::Json => print_json(&r, true),
                Format::Text => print_text(&retrieved_text(&r)),
            }
            Ok(EXIT_OK)
        }),
        Command::Search(args) => open(&db).and_then(|kb| search(&kb, format, args)),
        Command::Synonyms { action } => open(&db).and_then(|kb| {
            match action {
                SynonymsAction::Add { term, synonyms } => {
                    kb.run(
                        op::SYNONYMS_ADD,
                        &SynonymsParams {
                            term: term.clone(),
                            synonyms: synonyms.clone(),
                        },
                    )?;
                    match format {
                        Format::Json => {
                            print_json(&serde_json::json!({"term": term, "added": synonyms}), false)
                        }
                        Format::Text => print_text(&format!("{term} = {}", synonyms.join(", "))),
                    }
                }
                SynonymsAction::List => {
                    let list = kb.run(op::SYNONYMS_LIST, &NoParams {})?;
                    match format {
                        Format::Json => print_json(&list, true),
                        Format::Text => {
                            for e in list {
                                print_text(&format!("{}: {}", e.term, e.synonyms.join(", ")));
                            }
                        }
                    }
                }
                SynonymsAction::Remove { term, synonyms } => {
                    let v = kb.run(
                        op::SYNONYMS_REMOVE,
                        &SynonymsParams {
                            term: term.clone(),
                            synonyms,
                        },
                    )?;
                    let n = v["removed"].as_u64().unwrap_or(0);
                    match format {
                        Format::Json => {
                            print_json(&serde_json::json!({"term": term, "removed": n}), false)
                        }
                        Format::Text => print_text(&format!("removed {n} synonym(s) of {term}")),
                    }
                }
            }
            Ok(EXIT_OK)
        }),
        Command::Recall {
            kbids,
            depth,
            max_chars,
        } => open(&db).and_then(|kb| super::recall::run(&kb, format, kbids, depth, max_chars)),
        Command::Content { ids } => open(&db).and_then(|kb| {
            let c = kb.run(op::CONTENT, &IdsParams { ids })?;
            match format {
                Format::Json => print_json(&c, false),
                Format::Text => print_text(&c.data),
            }
            Ok(EXIT_OK)
        }),
        Command::Docs => open(&db).and_then(|kb| {
            let docs = kb.run(op::DOCS, &NoParams {})?;
            match format {
                Format::Json => print_json(&docs, true),
                Format::Text => {
                    for d in docs {
                        print_text(&format!(
                            "{}\t{}\t{} section(s)\t{}",
                            d.docid,
                            d.title.as_deref().unwrap_or("-"),
                            d.sections,
                            d.updated_at
                        ));
                    }
                }
            }
            Ok(EXIT_OK)
        }),
        Command::Export {
            path,
            with_indexes,
            force,
        } => open(&db).and_then(|kb| {
            super::maintenance::export(&kb, format, path, with_indexes, force)
        }),
        Command::Import { path, strict } => {
            super::maintenance::import(&db, embedded, format, &path, strict)
        }
        Command::Migrate { old_dir } => {
            super::maintenance::migrate(format, &old_dir, explicit_db.as_deref())
        }
        Command::Check => open(&db).and_then(|kb| super::maintenance::check(&kb, format)),
        Command::Gc => open(&db).and_then(|kb| {
            let r = kb.run(op::GC, &NoParams {})?;
            match format {
                Format::Json => print_json(&r, false),
                Format::Text => print_text(&format!(
                    "removed {} section(s), {} bytes",
                    r.removed_sections, r.removed_bytes
                )),
            }
            Ok(EXIT_OK)
        }),
        Command::Rebuild => open(&db).and_then(|kb| super::maintenance::rebuild(&kb, format)),
        Command::Status => open(&db).and_then(|kb| {
            let s = kb.run(op::STATUS, &NoParams {})?;
            match format {
                Format::Json => print_json(&s, true),
                Format::Text => print_text(&format!(
                    "database:  {}\nsections:  {}\ndocuments: {}\nschema:    v{}\nchanges:   {}\nstore:     {} bytes{}\nindex:     {} bytes, {} section(s), {} change(s) pending\nvectors:   {}",
                    s.context_path,
                    s.sections,
                    s.documents,
                    s.schema_version,
                    s.last_change_seq,
                    s.database_bytes,
                    s.content_dictionary
                        .map(|id| format!(", content dictionary {id}"))
                        .unwrap_or_default(),
                    s.index_bytes,
                    s.cache_stats.index_count,
                    s.index_pending_changes,
                    vectors_line(&s.vectors)
                )),
            }
            Ok(EXIT_OK)
        }),
    };
    result.unwrap_or_else(|e| report_error(format, &e))
}

/// The `vectors:` line of `status` in text.
fn vectors_line(v: &kbdb::VectorStatus) -> String {
    if v.provider == "none" {
        return "no embedding provider (lexical search only; see docs/vectors.md)".to_string();
    }
    let mut line = format!(
        "{} ({}), {} embedded, {} change(s) pending, {} failure(s)",
        v.provider, v.model, v.count, v.pending_changes, v.failures
    );
    if v.stale {
        line.push_str(&format!(
            "; STALE: stored vectors are of {} — run `kbdb rebuild`",
            v.stored_model.as_deref().unwrap_or("another model")
        ));
    }
    if let Some(e) = &v.last_error {
        line.push_str(&format!("; last error: {e}"));
    }
    line
}

fn daemon(
    db: &std::path::Path,
    format: Format,
    action: Option<DaemonAction>,
) -> Result<i32, KbError> {
    match action.unwrap_or(DaemonAction::Run) {
        DaemonAction::Run => {
            if let Err(e) = kbdb::daemon::server::serve(db) {
                // Nobody reads a started daemon's stderr: the client shows this log line.
                tracing::error!("{e}");
                return Err(e);
            }
            Ok(EXIT_OK)
        }
        DaemonAction::Status => {
            let dir = db
                .canonicalize()
                .map_err(|e| KbError::io(format!("cannot resolve {}", db.display()), e))?;
            let info = kbdb::daemon::client::daemon_info(&dir)?;
            match format {
                Format::Json => print_json(
                    &serde_json::json!({"running": info.is_some(), "daemon": info}),
                    false,
                ),
                Format::Text => match &info {
                    Some(i) => {
                        let mut text = format!(
                            "running: pid {}, kbdb {} ({}), serving {}",
                            i.pid, i.version, i.build, i.db
                        );
                        if let Some(a) = &i.activity {
                            let plural = |n: u64| if n == 1 { "" } else { "s" };
                            text.push_str(&format!(
                                "\nup {} s, {} client{} connected{} ({} subscribed to changes), {} write{} in {} group commit{}\nsocket {}\nlog {}",
                                a.uptime_secs,
                                a.clients,
                                plural(a.clients),
                                match a.max_clients {
                                    0 => String::new(),
                                    max => format!(" of at most {max}"),
                                },
                                a.subscribers,
                                a.writes,
                                plural(a.writes),
                                a.write_groups,
                                plural(a.write_groups),
                                a.socket,
                                a.log
                            ));
                        }
                        print_text(&text)
                    }
                    None => print_text(&format!("no daemon serves {}", dir.display())),
                },
            }
            Ok(EXIT_OK)
        }
        DaemonAction::Stop => {
            let dir = db
                .canonicalize()
                .map_err(|e| KbError::io(format!("cannot resolve {}", db.display()), e))?;
            let sock = kbdb::daemon::client::daemon_socket(&dir)?;
            let stopped = kbdb::daemon::client::stop_daemon(&sock)?;
            match format {
                Format::Json => print_json(&serde_json::json!({"stopped": stopped}), false),
                Format::Text if stopped => print_text("daemon stopped"),
                Format::Text => print_text("no daemon was running"),
            }
            Ok(EXIT_OK)
        }
    }
}

fn init(db: &std::path::Path, format: Format) -> Result<i32, KbError> {
    // An existing database is left alone (its daemon may hold it): only report it.
    let (dir, created) = if db.join(kbdb::store::DB_FILE).exists() {
        let dir = db
            .canonicalize()
            .map_err(|e| KbError::io(format!("cannot resolve {}", db.display()), e))?;
        (dir, false)
    } else {
        let (kb, created) = kbdb::Kb::open_or_create(db)?;
        (kb.dir().to_path_buf(), created)
    };
    match format {
        Format::Json => print_json(
            &serde_json::json!({ "path": dir.display().to_string(), "created": created }),
            false,
        ),
        Format::Text if created => print_text(&format!(
            "initialized an empty knowledge base in {}",
            dir.display()
        )),
        Format::Text => print_text(&format!(
            "a knowledge base already exists in {}",
            dir.display()
        )),
    }
    Ok(EXIT_OK)
}

fn retrieved_text(r: &Retrieved) -> String {
    match r {
        Retrieved::Sections(sections) => sections
            .iter()
            .map(|s| {
                if s.section_type.starts_with("image/") {
                    format!(
                        "{} ({}, {} bytes; use --format json for the base64 content)",
                        s.kbid, s.section_type, s.size
                    )
                } else {
                    s.content.clone()
                }
            })
            .collect::<Vec<_>>()
            .join("\n\n"),
        Retrieved::Document(d) => {
            let mut out = format!(
                "{}{} — {} section(s), updated {}\n",
                d.docid,
                d.title
                    .as_ref()
                    .map(|t| format!(" ({t})"))
                    .unwrap_or_default(),
                d.sections.len(),
                d.updated_at
            );
            for (i, s) in d.sections.iter().enumerate() {
                out.push_str(&format!(
                    "{:>3}. {}  {}  [{}]\n",
                    i + 1,
                    s.kbid,
                    s.heading.as_deref().unwrap_or("(untitled)"),
                    s.section_type
                ));
            }
            out.trim_end().to_string()
        }
    }
}

fn search(kb: &Backend, format: Format, a: SearchArgs) -> Result<i32, KbError> {
    let req = kbdb::SearchRequest {
        query: a.query.join(" "),
        // clap checked the values against the same names; parsed once here.
        mode: a
            .mode
            .as_deref()
            .map(SearchMode::parse)
            .transpose()?
            .flatten(),
        search_mode: a
            .search_mode
            .as_deref()
            .map(Retrieval::parse)
            .transpose()?
            .flatten(),
        limit: a.limit,
        offset: a.offset,
        content: a.content,
        tags: a.tags,
        section_type: a.section_type,
        docid: a.docid,
        model: a.model,
        where_: match &a.where_ {
            Some(w) => Some(
                serde_json::from_str(w)
                    .map_err(|e| KbError::invalid("where", format!("is not valid JSON: {e}")))?,
            ),
            None => None,
        },
        min_score: a.min_score,
    };
    let r = kb.run(op::SEARCH, &req)?;
    if format == Format::Json {
        print_json(&r, true);
        return Ok(EXIT_OK);
    }
    let bold = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let (open, close) = if bold {
        ("\x1b[1m", "\x1b[0m")
    } else {
        ("[", "]")
    };
    let mut out = String::new();
    let item_text = |i: &kbdb::SearchItem, n: usize, indent: &str| -> String {
        let mut s = format!(
            "{indent}{n}. {}  [{}]  {}\n",
            i.heading.as_deref().unwrap_or("(untitled)"),
            i.section_type,
            i.kbid
        );
        if !i.docids.is_empty() {
            s.push_str(&format!("{indent}   in {}\n", i.docids.join(", ")));
        }
        if !i.snippet.is_empty() {
            s.push_str(&format!(
                "{indent}   {}\n",
                kbdb::search::snippet::mark(&i.snippet, &i.matched_terms, open, close)
            ));
        }
        if let Some(c) = &i.content {
            s.push_str(&format!("{indent}   ---\n{c}\n{indent}   ---\n"));
        }
        s
    };
    match &r.items {
        kbdb::SearchItems::Sections(items) => {
            for (n, i) in items.iter().enumerate() {
                out.push_str(&item_text(i, r.offset + n + 1, ""));
            }
        }
        kbdb::SearchItems::Documents(docs) => {
            for (n, d) in docs.iter().enumerate() {
                out.push_str(&format!(
                    "{}. {}{} — {} matching section(s)\n",
                    r.offset + n + 1,
                    d.docid.as_deref().unwrap_or("(no document)"),
                    d.title
                        .as_ref()
                        .map(|t| format!(" ({t})"))
                        .unwrap_or_default(),
                    d.hits
                ));
                for (m, i) in d.sections.iter().enumerate() {
                    out.push_str(&item_text(i, m + 1, "    "));
                }
            }
        }
    }
    if let Some(st) = &r.stats {
        out.push_str(&format!("{} matching section(s)\n", r.total));
        for (title, map) in [
            ("type", &st.by_type),
            ("tag", &st.by_tag),
            ("document", &st.by_document),
        ] {
            if !map.is_empty() {
                out.push_str(&format!("by {title}:\n"));
                for (k, v) in map.iter() {
                    out.push_str(&format!("  {v:>6}  {k}\n"));
                }
            }
        }
        out.push_str("terms (sections containing each):\n");
        for t in &st.terms {
            out.push_str(&format!("  {:>6}  {}\n", t.document_frequency, t.term));
        }
    } else {
        let shown = r.items.len();
        out.push_str(&format!(
            "{}{} of {} result(s){}\n",
            if shown > 0 {
                format!("{}-", r.offset + 1)
            } else {
                String::new()
            },
            r.offset + shown,
            r.total,
            if r.has_more { " (more: --offset)" } else { "" }
        ));
    }
    if r.retrieval_method != "lexical" {
        out.push_str(&format!(
            "ranked by: {}\n",
            if r.retrieval_method == "hybrid" {
                "words and meaning (hybrid)"
            } else {
                "meaning (vector)"
            }
        ));
    }
    if r.relaxed {
        out.push_str("note: no section has all the words; showing sections with some of them\n");
    }
    if let Some(h) = &r.hint
        && !r.relaxed
    {
        out.push_str(&format!("hint: {h}\n"));
    }
    for w in &r.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    print_text(out.trim_end());
    Ok(EXIT_OK)
}
