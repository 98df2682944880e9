//! Synonyms applied at query time: a small built-in list plus the user's, stored in the database.

/// Built-in groups of interchangeable words (lowercase). A query word in a group also matches
/// the other words of the group.
pub const BUILTIN: &[&[&str]] = &[
    &["db", "database"],
    &["config", "configuration", "settings"],
    &["auth", "authentication"],
    &["authz", "authorization"],
    &["k8s", "kubernetes"],
    &["js", "javascript"],
    &["ts", "typescript"],
    &["py", "python"],
    &["repo", "repository"],
    &["env", "environment"],
    &["dir", "directory", "folder"],
    &["fn", "func", "function"],
    &["param", "parameter"],
    &["arg", "argument"],
    &["err", "error"],
    &["msg", "message"],
    &["pg", "postgres", "postgresql"],
    &["docs", "documentation"],
    &["deps", "dependencies"],
    &["perf", "performance"],
    &["delete", "remove"],
];

/// Built-in synonyms of a lowercase word (not including the word itself).
pub fn builtin(word: &str) -> Vec<String> {
    BUILTIN
        .iter()
        .filter(|g| g.contains(&word))
        .flat_map(|g| g.iter().filter(|w| **w != word).map(|w| w.to_string()))
        .collect()
}
