//! `check`, `export`, `import`, `migrate`: maintenance commands, with a progress bar on stderr
//! when it is a terminal.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};

use kbdb::daemon::operations::op;
use kbdb::daemon::params::NoParams;
use kbdb::{CheckResult, ExportOptions, ImportResult, Kb, KbError};

use super::backend::Backend;

use super::args::Format;
use super::output::{EXIT_CHECK_FAILED, EXIT_OK, print_json, print_text};

/// A progress bar on stderr when it is a terminal; hidden otherwise (pipes, CI, MCP).
pub fn progress_bar(label: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg:>10} [{bar:40}] {human_pos}/{human_len} ({rate}, {eta})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .with_key("rate", rate_key)
        .progress_chars("=> "),
    );
    bar.set_message(label.to_string());
    bar
}

/// A counter on stderr when it is a terminal, for work of unknown length (a `--jsonl` stream):
/// how many `unit` so far, and how many a second.
pub fn counter_bar(label: &str, unit: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{msg:>10}} {{spinner}} {{human_pos}} {unit} ({{rate}}, {{elapsed}})"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
        .with_key("rate", rate_key),
    );
    bar.set_message(label.to_string());
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    bar
}

/// The `{rate}` of a bar: how many a second, in whole numbers (indicatif's `{per_sec}` prints
/// four decimals: "20,792.3415/s").
fn rate_key(state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write) {
    let _ = w.write_str(&rate(state.per_sec()));
}

fn rate(per_sec: f64) -> String {
    let whole = if per_sec.is_finite() && per_sec > 0.0 {
        per_sec.round() as u64
    } else {
        0
    };
    format!("{}/s", indicatif::HumanCount(whole))
}

/// A progress callback `(done, total)` driving `bar`.
pub fn reporter(bar: &ProgressBar) -> impl Fn(u64, u64) + '_ {
    move |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    }
}

pub fn check(kb: &Backend, format: Format) -> Result<i32, KbError> {
    let bar = progress_bar("check");
    let r = kb.run_progress(op::CHECK, &NoParams {}, Some(&reporter(&bar)))?;
    bar.finish_and_clear();
    match format {
        Format::Json => print_json(&r, true),
        Format::Text => print_text(&check_text(&r)),
    }
    Ok(if r.ok { EXIT_OK } else { EXIT_CHECK_FAILED })
}

fn check_text(r: &CheckResult) -> String {
    let mut out = format!(
        "{}: {} section(s), {} document(s), {} reference(s) checked in {:.0} ms",
        if r.ok { "ok" } else { "errors found" },
        r.sections_checked,
        r.documents_checked,
        r.references_checked,
        r.elapsed_ms
    );
    for (label, list) in [("error", &r.errors), ("warning", &r.warnings)] {
        for f in list {
            out.push_str(&format!("\n{label}: {} {}: {}", f.kind, f.entity, f.detail));
        }
    }
    out
}

pub fn export(
    kb: &Backend,
    format: Format,
    path: PathBuf,
    with_indexes: bool,
    force: bool,
) -> Result<i32, KbError> {
    let bar = progress_bar("export");
    let opts = ExportOptions {
        path,
        with_indexes,
        force,
        confine_to: None,
    };
    let r = kb.export_with_progress(&opts, &reporter(&bar))?;
    bar.finish_and_clear();
    match format {
        Format::Json => print_json(&r, false),
        Format::Text => print_text(&format!(
            "exported {} section(s) and {} document(s) to {}",
            r.sections_exported, r.documents_exported, r.path
        )),
    }
    Ok(EXIT_OK)
}

/// `import` into the database in `db`. A database that does not exist yet is created here, in
/// this process, once the layout has been verified (`Kb::import_creating`: a refused import
/// creates nothing); an existing one imports through its daemon (or embedded).
pub fn import(
    db: &Path,
    embedded: bool,
    format: Format,
    path: &Path,
    strict: bool,
) -> Result<i32, KbError> {
    let bar = progress_bar("import");
    let r = if db.join(kbdb::store::DB_FILE).exists() {
        let (kb, _) = Backend::open(db, embedded, false)?;
        kb.import_with_progress(path, strict, &reporter(&bar))?
    } else {
        Kb::import_creating(db, path, strict, &reporter(&bar))?.1
    };
    bar.finish_and_clear();
    print_import(format, &r);
    Ok(EXIT_OK)
}

pub fn migrate(format: Format, old_dir: &Path, new_db: Option<&Path>) -> Result<i32, KbError> {
    let bar = progress_bar("migrate");
    let (_kb, r) = Kb::migrate_with_progress(old_dir, new_db, &reporter(&bar))?;
    bar.finish_and_clear();
    print_import(format, &r);
    Ok(EXIT_OK)
}

fn print_import(format: Format, r: &ImportResult) {
    match format {
        Format::Json => print_json(r, true),
        Format::Text => {
            let mut out = format!(
                "imported {} section(s) ({} already present), {} document(s) ({} replaced), {} synonym term(s) from {}",
                r.sections_imported,
                r.sections_existing,
                r.documents_imported,
                r.documents_replaced,
                r.synonyms_imported,
                r.path
            );
            for p in &r.problems {
                // The catalog's counts are a warning about the whole import, not an entry skipped.
                let label = if p.path == kbdb::snapshot::layout::CATALOG {
                    "warning:"
                } else {
                    "skipped"
                };
                out.push_str(&format!("\n{label} {}: {}", p.path, p.reason));
            }
            print_text(&out);
        }
    }
}

pub fn rebuild(kb: &Backend, format: Format) -> Result<i32, KbError> {
    let bar = progress_bar("rebuild");
    let r = kb.run_progress(op::REBUILD, &NoParams {}, Some(&reporter(&bar)))?;
    bar.finish_and_clear();
    match format {
        Format::Json => print_json(&r, false),
        Format::Text => print_text(&format!(
            "reindexed {} section(s), {} terms{} in {:.0} ms",
            r.sections_reindexed,
            r.terms_indexed,
            match (r.vectors_embedded, r.vector_failures) {
                (Some(n), Some(f)) if f > 0 => format!("; embedded {n} ({f} refused)"),
                (Some(n), _) => format!("; embedded {n}"),
                _ => String::new(),
            },
            r.elapsed_ms
        )),
    }
    Ok(EXIT_OK)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_rate_is_a_whole_number_a_second() {
        assert_eq!(super::rate(20_792.25), "20,792/s");
        assert_eq!(super::rate(0.4), "0/s");
        assert_eq!(super::rate(2.5), "3/s");
        assert_eq!(super::rate(f64::NAN), "0/s");
        assert_eq!(super::rate(f64::INFINITY), "0/s");
    }
}
