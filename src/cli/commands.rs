//! One function per command: open the database, call `Kb`, print the result.

use std::path::PathBuf;

use clap::CommandFactory;
use kbdb::{Kb, KbError, Retrieved};

use super::args::{Cli, Command, Format};
use super::output::{EXIT_OK, print_json, print_text, report_error};

/// Default database folder for people: `.kbdb` in the working directory.
pub const DEFAULT_DB: &str = ".kbdb";

pub fn dispatch(cli: Cli) -> i32 {
    let format = cli.format;
    let db = cli.db.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_DB));
    let result = match cli.command {
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "kbdb", &mut std::io::stdout());
            Ok(EXIT_OK)
        }
        Command::Init => init(&db, format),
        Command::Learn(args) => super::learn::run(&db, format, args),
        Command::Unlearn { kbid } => Kb::open(&db).and_then(|kb| {
            let r = kb.unlearn(&kbid)?;
            match format {
                Format::Json => print_json(&r, false),
                Format::Text if r.removed => print_text(&format!("removed {kbid}")),
                Format::Text => print_text(&format!(
                    "{kbid} was not in the knowledge base; nothing removed"
                )),
            }
            Ok(EXIT_OK)
        }),
        Command::Retrieve { kbid, docid } => Kb::open(&db).and_then(|kb| {
            let r = kb.retrieve(kbid.as_deref(), docid.as_deref())?;
            match format {
                Format::Json => print_json(&r, true),
                Format::Text => print_text(&retrieved_text(&r)),
            }
            Ok(EXIT_OK)
        }),
        Command::Status => Kb::open(&db).and_then(|kb| {
            let s = kb.status()?;
            match format {
                Format::Json => print_json(&s, true),
                Format::Text => print_text(&format!(
                    "database:  {}\nsections:  {}\ndocuments: {}\nschema:    v{}\nchanges:   {}",
                    s.context_path, s.sections, s.documents, s.schema_version, s.last_change_seq
                )),
            }
            Ok(EXIT_OK)
        }),
    };
    result.unwrap_or_else(|e| report_error(format, &e))
}

fn init(db: &std::path::Path, format: Format) -> Result<i32, KbError> {
    let (kb, created) = Kb::open_or_create(db)?;
    match format {
        Format::Json => print_json(
            &serde_json::json!({ "path": kb.dir().display().to_string(), "created": created }),
            false,
        ),
        Format::Text if created => print_text(&format!(
            "initialized an empty knowledge base in {}",
            kb.dir().display()
        )),
        Format::Text => print_text(&format!(
            "a knowledge base already exists in {}",
            kb.dir().display()
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
