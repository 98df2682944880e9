//! Skills and agents (the MCP spec's skill-* and agent-* tools, and its prompts).
//!
//! A **skill** is a section of type `skill` whose content is its definition as JSON
//! (`{name, description, arguments, body}`), learned on its own (never collected) under the
//! source key `skill:<name>`, so learning a skill of the same name again supersedes the old one
//! — and agents that listed the old kbid now list the new one. An **agent** is a document
//! `agent-<name>` of type `agent` whose metadata holds its name, description and persona and
//! whose ordered sections are its skills. See docs/mcp.md.

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::{KbError, Result};

pub const SKILL_TYPE: &str = "skill";
pub const AGENT_TYPE: &str = "agent";
pub const SKILL_KEY_PREFIX: &str = "skill:";
pub const AGENT_DOCID_PREFIX: &str = "agent-";
pub(crate) const MAX_NAME_CHARS: usize = 64;

// One argument of a skill's template; also an item of the `skill-learn` tool's `arguments`
// (the field doc comments are its descriptions; no doc comment on the type, which would
// become the item's description).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillArgument {
    /// Placeholder name as written in `{{...}}`.
    pub name: String,
    /// What to pass for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether rendering the prompt needs a value.
    #[serde(default)]
    pub required: bool,
}

/// What `skill-learn` takes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SkillInput {
    pub name: String,
    pub description: String,
    #[serde(default)]
    pub arguments: Option<Vec<SkillArgument>>,
    pub body: String,
}

/// A stored skill (`skill-get`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SkillDefinition {
    pub kbid: String,
    pub name: String,
    pub description: String,
    pub arguments: Vec<SkillArgument>,
    pub body: String,
}

/// The stored content of a skill section (the definition without its kbid).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct SkillContent {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) arguments: Vec<SkillArgument>,
    pub(crate) body: String,
}

/// `skill-learn`'s result: the learn result's fields plus the name and arguments.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SkillLearnResult {
    pub kbid: String,
    pub name: String,
    pub arguments: Vec<SkillArgument>,
    /// The kbid of the previous version of this skill, when it replaced one (all of them, as
    /// an array, when it replaced several).
    #[serde(default)]
    pub superseded: crate::types::Superseded,
    pub created_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SkillSummary {
    pub kbid: String,
    pub name: String,
    pub description: String,
    #[serde(rename = "argumentCount")]
    pub argument_count: usize,
}

/// What `agent-create` takes: the parameters of the method and MCP tool (their `inputSchema` is
/// derived from this type; the field doc comments are its descriptions).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentInput {
    /// Agent name, kebab-case (lowercase letters and digits, words joined by `-`), e.g.
    /// `code-reviewer`.
    pub name: String,
    /// What the agent does; shown in prompt lists.
    pub description: String,
    /// System prompt text for the agent.
    pub persona: String,
    /// Skill kbids, in the order the agent lists them.
    pub skills: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AgentSkill {
    pub kbid: String,
    /// Null when the skill has been deleted.
    pub name: Option<String>,
    pub position: usize,
}

/// A stored agent (`agent-get`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AgentDefinition {
    pub docid: String,
    pub name: String,
    pub description: String,
    pub persona: String,
    pub skills: Vec<AgentSkill>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AgentSummary {
    pub docid: String,
    pub name: String,
    pub description: String,
    #[serde(rename = "skillCount")]
    pub skill_count: usize,
}

/// The agent's metadata object (stored as the document's metadata JSON).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct AgentMeta {
    pub agent: AgentMetaInner,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct AgentMetaInner {
    pub name: String,
    pub description: String,
    pub persona: String,
}

/// A kebab-case identifier: lowercase letters and digits in words joined by single `-`.
pub fn validate_name(field: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && name.split('-').all(|w| {
            !w.is_empty()
                && w.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        });
    if ok {
        Ok(())
    } else {
        Err(KbError::invalid(
            field,
            format!(
                "must be kebab-case (lowercase letters and digits, words joined by '-'), at most {MAX_NAME_CHARS} characters; got {:?}",
                crate::text::preview(name, 80)
            ),
        ))
    }
}

pub(crate) fn required_text(field: &str, value: &str) -> Result<()> {
    if value.trim().is_empty() {
        return Err(KbError::invalid(field, "must not be empty"));
    }
    Ok(())
}

/// The `{{name}}` placeholders of a template, in order of first appearance.
pub fn placeholders(body: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = body;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else { break };
        let name = after[..end].trim();
        if !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            && !out.iter().any(|n| n == name)
        {
            out.push(name.to_string());
        }
        rest = &after[end + 2..];
    }
    out
}

/// The arguments of a skill: those given (validated, in order), then every placeholder not
/// among them (required).
pub(crate) fn merge_arguments(
    given: Option<Vec<SkillArgument>>,
    body: &str,
) -> Result<Vec<SkillArgument>> {
    let mut args = given.unwrap_or_default();
    let mut seen = BTreeSet::new();
    for (i, a) in args.iter().enumerate() {
        if a.name.trim().is_empty() {
            return Err(KbError::invalid(
                &format!("arguments[{i}].name"),
                "must not be empty",
            ));
        }
        if !seen.insert(a.name.clone()) {
            return Err(KbError::invalid(
                &format!("arguments[{i}].name"),
                format!("{:?} is listed twice", a.name),
            ));
        }
    }
    for p in placeholders(body) {
        if !seen.contains(&p) {
            seen.insert(p.clone());
            args.push(SkillArgument {
                name: p,
                description: None,
                required: true,
            });
        }
    }
    Ok(args)
}

/// The longest prompt [`render`] produces (bytes): a template and argument values that would
/// make more are an error, not an allocation without bound.
pub const MAX_RENDERED_BYTES: usize = 16 * 1024 * 1024;

/// Render a template: each `{{name}}` becomes its argument's value, inserted as is (a value
/// holding `{{other}}` is not expanded again). Missing required arguments are an error naming
/// them; a missing optional one renders empty.
pub fn render(
    body: &str,
    arguments: &[SkillArgument],
    values: &serde_json::Map<String, serde_json::Value>,
) -> Result<String> {
    let missing: Vec<&str> = arguments
        .iter()
        .filter(|a| a.required && !values.contains_key(&a.name))
        .map(|a| a.name.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(KbError::invalid(
            "arguments",
            format!("missing required argument(s): {}", missing.join(", ")),
        ));
    }
    let names = placeholders(body);
    let value_of = |name: &str| match values.get(name) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => String::new(),
    };
    // One pass over the template: both `{{name}}` and `{{ name }}` forms.
    let mut out = String::with_capacity(body.len());
    let mut rest = body;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let name = after.find("}}").map(|end| (after[..end].trim(), end));
        match name {
            Some((name, end)) if names.iter().any(|n| n == name) => {
                out.push_str(&rest[..start]);
                let value = value_of(name);
                if out.len() + value.len() > MAX_RENDERED_BYTES {
                    return Err(KbError::invalid(
                        "arguments",
                        format!(
                            "the rendered prompt would exceed {MAX_RENDERED_BYTES} bytes; shorten the argument values"
                        ),
                    ));
                }
                out.push_str(&value);
                rest = &after[end + 2..];
            }
            _ => {
                out.push_str(&rest[..start + 2]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_and_rendering() {
        let body = "Review {{file}} for {{ focus }}; again {{file}}. {{}} {{bad name}}";
        assert_eq!(placeholders(body), vec!["file", "focus"]);
        let args = merge_arguments(None, body).unwrap();
        assert!(args.iter().all(|a| a.required));
        let mut v = serde_json::Map::new();
        v.insert("file".into(), "lib.rs".into());
        assert!(
            render(body, &args, &v)
                .unwrap_err()
                .to_string()
                .contains("focus")
        );
        v.insert("focus".into(), "safety".into());
        assert_eq!(
            render(body, &args, &v).unwrap(),
            "Review lib.rs for safety; again lib.rs. {{}} {{bad name}}"
        );
    }

    #[test]
    fn names_are_kebab_case() {
        for ok in ["review", "code-review", "a1-b2"] {
            validate_name("name", ok).unwrap();
        }
        for bad in ["", "Review", "code_review", "-x", "x-", "a--b", "a b"] {
            assert!(validate_name("name", bad).is_err(), "{bad}");
        }
    }
}
