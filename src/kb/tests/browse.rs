//! Browsing: one page of the documents newest first, and the validation report kept up to date.

use super::*;

/// The documents listing every page of `documents_page` should give: `list_documents` sorted
/// newest first, ties by docid.
fn newest_first_oracle(kb: &Kb) -> Vec<(String, usize, String)> {
    let mut all: Vec<(String, usize, String)> = kb
        .list_documents()
        .unwrap()
        .into_iter()
        .map(|d| (d.docid, d.sections, d.updated_at))
        .collect();
    all.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    all
}

/// Every page of `documents_page` (pages of `size`), concatenated, with the totals they gave.
fn all_pages(kb: &Kb, size: usize) -> Vec<(String, usize, String)> {
    let mut out = Vec::new();
    loop {
        let page = kb.documents_page(out.len(), size).unwrap();
        assert_eq!(page.total, kb.list_documents().unwrap().len());
        assert_eq!(page.offset, out.len());
        let n = page.documents.len();
        assert!(n <= size);
        out.extend(
            page.documents
                .into_iter()
                .map(|d| (d.docid, d.sections, d.updated_at)),
        );
        if n < size {
            return out;
        }
    }
}

#[test]
fn documents_page_lists_newest_first_and_follows_edits_renames_and_deletes() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    // Some documents in one transaction (same updated_at: ties by docid), some apart.
    let batch: Vec<WriteOp> = (0..7)
        .map(|i| {
            WriteOp::Learn(LearnRequest {
                docid: Some(format!("batch/{i}")),
                ..LearnRequest::text(format!("Batch fact number {i}."))
            })
        })
        .collect();
    for r in kb.write_group(batch).unwrap() {
        r.unwrap();
    }
    for i in 0..6 {
        std::thread::sleep(std::time::Duration::from_millis(3));
        kb.learn_document(&format!("d/{i}"), &format!("# D{i}\n\nText {i}.\n"), None)
            .unwrap();
    }
    assert_eq!(kb.documents_page(0, 100).unwrap().total, 13);
    assert_eq!(all_pages(&kb, 4), newest_first_oracle(&kb));
    assert_eq!(kb.documents_page(0, 1).unwrap().documents[0].docid, "d/5");
    let batch_order: Vec<String> = all_pages(&kb, 100)
        .into_iter()
        .map(|d| d.0)
        .filter(|d| d.starts_with("batch/"))
        .collect();
    assert_eq!(
        batch_order,
        (0..7).map(|i| format!("batch/{i}")).collect::<Vec<_>>()
    );
    // An edit moves a document to the front, with its new section count.
    std::thread::sleep(std::time::Duration::from_millis(3));
    kb.learn(LearnRequest {
        docid: Some("d/1".into()),
        ..LearnRequest::text("A second section of d/1.")
    })
    .unwrap();
    let first = &kb.documents_page(0, 1).unwrap().documents[0];
    assert_eq!((first.docid.as_str(), first.sections), ("d/1", 2));
    assert_eq!(all_pages(&kb, 4), newest_first_oracle(&kb));
    // A delete takes it out of every page; a page past the end is empty.
    assert!(kb.remove_document("d/3").unwrap());
    let pages = all_pages(&kb, 4);
    assert_eq!(pages.len(), 12);
    assert!(pages.iter().all(|d| d.0 != "d/3"));
    assert_eq!(pages, newest_first_oracle(&kb));
    assert!(kb.documents_page(12, 4).unwrap().documents.is_empty());
    // A rename (the document learned under a new docid, the old one removed) and the removal of
    // a document's last section.
    std::thread::sleep(std::time::Duration::from_millis(3));
    kb.learn_document("d/renamed", "# D0\n\nText 0.\n", None)
        .unwrap();
    assert!(kb.remove_document("d/0").unwrap());
    let batch2 = kb.retrieve_document("batch/2").unwrap().kbids;
    assert_eq!(batch2.len(), 1);
    kb.unlearn(&batch2[0]).unwrap();
    let pages = all_pages(&kb, 5);
    assert_eq!(pages[0].0, "d/renamed");
    assert!(pages.iter().all(|d| d.0 != "d/0" && d.0 != "batch/2"));
    assert_eq!(pages, newest_first_oracle(&kb));
    // A second handle on the same store (another process's writes) catches up too.
    drop(kb);
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    assert_eq!(all_pages(&kb, 3), newest_first_oracle(&kb));
}

const VALIDATION_MODELS: &str = r#"
[[model]]
name = "Epic"
prefix = "epics/"

[[model.sections]]
heading = "Goal"
required = true

[model.relationships.stories]
type = "hasMany"
model = "Story"
heading = "Stories"

[[model]]
name = "Story"
prefix = "stories/"
"#;

#[test]
fn validation_report_follows_the_writes_that_fix_or_break_a_document() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    kb.models_load(VALIDATION_MODELS).unwrap();
    let epic = |goal: bool| {
        format!(
            "# Epic\n\n{}## Stories\n\n- [One](stories/one)\n",
            if goal { "## Goal\n\nShip it.\n\n" } else { "" }
        )
    };
    kb.learn_document("epics/e", &epic(true), None).unwrap();
    for i in 0..5 {
        kb.learn_document(
            &format!("notes/{i}"),
            &format!("# Note {i}\n\nx{i}\n"),
            None,
        )
        .unwrap();
    }
    let problems = |r: &crate::collections::validations::ValidationReport| -> Vec<String> {
        r.problems
            .iter()
            .flat_map(|v| {
                v.errors
                    .iter()
                    .map(move |e| format!("{} {}", v.docid, e.message))
            })
            .collect()
    };
    let r = kb.validation_report(100).unwrap();
    assert_eq!((r.checked, r.invalid, r.revalidated), (6, 1, 6));
    assert_eq!(problems(&r), ["epics/e item stories/one does not exist"]);
    // Nothing changed: nothing validated again.
    let r = kb.validation_report(100).unwrap();
    assert_eq!((r.checked, r.invalid, r.revalidated), (6, 1, 0));
    // The missing story is created: the epic that names it is validated again and is valid.
    kb.learn_document("stories/one", "# One\n\nA story.\n", None)
        .unwrap();
    let r = kb.validation_report(100).unwrap();
    assert_eq!(
        (r.checked, r.invalid, r.revalidated),
        (7, 0, 2),
        "{:?}",
        problems(&r)
    );
    // An edit that breaks the epic shows at once; one that fixes it too.
    kb.learn_document("epics/e", &epic(false), None).unwrap();
    let r = kb.validation_report(100).unwrap();
    assert_eq!((r.invalid, r.revalidated), (1, 1));
    assert_eq!(problems(&r), ["epics/e required section missing"]);
    kb.learn_document("epics/e", &epic(true), None).unwrap();
    assert_eq!(kb.validation_report(100).unwrap().invalid, 0);
    // The story removed: the epic is invalid again; the story is no longer checked.
    assert!(kb.remove_document("stories/one").unwrap());
    let r = kb.validation_report(100).unwrap();
    assert_eq!((r.checked, r.invalid), (6, 1));
    assert_eq!(problems(&r), ["epics/e item stories/one does not exist"]);
    // The limit bounds the list, not the counts.
    kb.learn_document("epics/f", "# F\n\nNo goal.\n", None)
        .unwrap();
    let r = kb.validation_report(1).unwrap();
    assert_eq!((r.invalid, r.with_problems, r.problems.len()), (2, 2, 1));
    // New models validate everything again.
    kb.models_load("[[model]]\nname = \"Story\"\nprefix = \"stories/\"\n")
        .unwrap();
    let r = kb.validation_report(100).unwrap();
    assert_eq!((r.checked, r.invalid, r.revalidated), (7, 0, 7));
}
