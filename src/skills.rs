//! Skills and agents (the MCP spec's skill-* and agent-* tools, and its prompts).
//!
//! A **skill** is a section of type `skill` whose content is its definition as JSON
//! (`{name, description, arguments, body}`), learned on its own (never collected) under the
//! source key `skill:<name>`, so learning a skill of the same name again supersedes the old one
//! — and agents that listed the old kbid now list the new one. An **agent** is a document
//! `agent-<name>` of type `agent` whose metadata holds its name, description and persona and
//! whose ordered sections are its skills. See docs/mcp.md.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::error::{KbError, Result};

pub const SKILL_TYPE: &str = "skill";
pub const AGENT_TYPE: &str = "agent";
pub const SKILL_KEY_PREFIX: &str = "skill:";
pub const AGENT_DOCID_PREFIX: &str = "agent-";
const MAX_NAME_CHARS: usize = 64;

/// One argument of a skill's template.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SkillArgument {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
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
struct SkillContent {
    name: String,
    description: String,
    arguments: Vec<SkillArgument>,
    body: String,
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
    pub superseded: crate::model::Superseded,
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

/// What `agent-create` takes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AgentInput {
    pub name: String,
    pub description: String,
    pub persona: String,
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

fn required_text(field: &str, value: &str) -> Result<()> {
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
fn merge_arguments(given: Option<Vec<SkillArgument>>, body: &str) -> Result<Vec<SkillArgument>> {
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

impl crate::Kb {
    /// `skill-learn`: store (or replace) the skill `name`.
    pub fn skill_learn(&self, input: SkillInput) -> Result<SkillLearnResult> {
        validate_name("name", &input.name)?;
        required_text("description", &input.description)?;
        if input.body.trim().is_empty() {
            return Err(KbError::InvalidInput {
                field: "body".into(),
                message: "skill body must not be empty".into(),
            });
        }
        let arguments = merge_arguments(input.arguments, &input.body)?;
        let content = SkillContent {
            name: input.name.clone(),
            description: input.description.clone(),
            arguments: arguments.clone(),
            body: input.body,
        };
        let text =
            serde_json::to_string_pretty(&content).map_err(|e| KbError::Storage(e.to_string()))?;
        let r = self.learn(crate::LearnRequest {
            content: text,
            section_type: Some(SKILL_TYPE.into()),
            title: Some(input.name.clone()),
            description: Some(input.description),
            source: Some(format!("{SKILL_KEY_PREFIX}{}", input.name)),
            replace: true,
            ..Default::default()
        })?;
        Ok(SkillLearnResult {
            kbid: r.kbid,
            name: input.name,
            arguments,
            superseded: r.superseded,
            created_at: r.created_at,
        })
    }

    /// Every skill, by name.
    pub fn skill_list(&self) -> Result<Vec<SkillSummary>> {
        Ok(self
            .skills()?
            .into_iter()
            .map(|s| SkillSummary {
                argument_count: s.arguments.len(),
                kbid: s.kbid,
                name: s.name,
                description: s.description,
            })
            .collect())
    }

    /// All skill definitions, by name.
    pub fn skills(&self) -> Result<Vec<SkillDefinition>> {
        let kbids = self.source_key_range(SKILL_KEY_PREFIX)?;
        let mut out = Vec::with_capacity(kbids.len());
        for kbid in kbids {
            if let Some(s) = self.skill_by_kbid(&kbid)? {
                out.push(s);
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name).then(a.kbid.cmp(&b.kbid)));
        Ok(out)
    }

    /// A skill by kbid (None when that section is not a skill or does not exist).
    pub fn skill_by_kbid(&self, kbid: &str) -> Result<Option<SkillDefinition>> {
        crate::model::kbid::validate_kbid("kbid", kbid)?;
        let Some(s) = self.read_sections(&[kbid]).ok().and_then(|mut v| v.pop()) else {
            return Ok(None);
        };
        if s.section_type != SKILL_TYPE {
            return Ok(None);
        }
        let c: SkillContent = serde_json::from_str(&s.content).map_err(|e| KbError::Corrupt {
            table: "content",
            key: kbid.to_string(),
            detail: format!("skill content is not a skill definition: {e}"),
        })?;
        Ok(Some(SkillDefinition {
            kbid: kbid.to_string(),
            name: c.name,
            description: c.description,
            arguments: c.arguments,
            body: c.body,
        }))
    }

    /// `skill-get`: by kbid (takes precedence) or name.
    pub fn skill_get(&self, name: Option<&str>, kbid: Option<&str>) -> Result<SkillDefinition> {
        match (kbid, name) {
            (Some(k), _) => self
                .skill_by_kbid(k)?
                .ok_or_else(|| KbError::NotFound(format!("Skill not found: {k}"))),
            (None, Some(n)) => self
                .skills()?
                .into_iter()
                .find(|s| s.name == n)
                .ok_or_else(|| KbError::NotFound(format!("Skill not found: {n}"))),
            (None, None) => Err(KbError::invalid("name", "Provide name or kbid")),
        }
    }

    /// `skill-delete`: remove a skill section. Agents listing it keep the entry, now dangling
    /// (`agent-get` shows `name: null`), as the spec says — unlike other documents, which
    /// drop a removed section.
    pub fn skill_delete(&self, kbid: &str) -> Result<bool> {
        if self.skill_by_kbid(kbid)?.is_none() {
            return Err(KbError::NotFound(format!("Skill not found: {kbid}")));
        }
        let removed = self.remove_section_keeping(kbid, |doc| doc.doc_type == AGENT_TYPE)?;
        Ok(removed)
    }

    /// `agent-create`: the document `agent-<name>` holding the persona and the skills in order.
    /// Creating an agent of an existing name replaces it.
    pub fn agent_create(&self, input: AgentInput) -> Result<AgentDefinition> {
        validate_name("name", &input.name)?;
        required_text("description", &input.description)?;
        required_text("persona", &input.persona)?;
        let mut missing = Vec::new();
        for (i, k) in input.skills.iter().enumerate() {
            crate::model::kbid::validate_kbid(&format!("skills[{i}]"), k)?;
            if self.skill_by_kbid(k)?.is_none() {
                missing.push(k.as_str());
            }
        }
        if !missing.is_empty() {
            return Err(KbError::invalid(
                "skills",
                format!("not skills of this knowledge base: {}", missing.join(", ")),
            ));
        }
        let docid = format!("{AGENT_DOCID_PREFIX}{}", input.name);
        let meta = AgentMeta {
            agent: AgentMetaInner {
                name: input.name.clone(),
                description: input.description.clone(),
                persona: input.persona.clone(),
            },
        };
        let meta = serde_json::to_string(&meta).map_err(|e| KbError::Storage(e.to_string()))?;
        self.set_document(
            &docid,
            input.skills,
            Some(input.name.clone()),
            AGENT_TYPE,
            Some(meta),
        )?;
        self.agent_get(&docid)
    }

    /// Every agent, by docid.
    pub fn agent_list(&self) -> Result<Vec<AgentSummary>> {
        let mut out = Vec::new();
        for d in self.list_documents()? {
            if !d.docid.starts_with(AGENT_DOCID_PREFIX) {
                continue;
            }
            if let Ok(a) = self.agent_get(&d.docid) {
                out.push(AgentSummary {
                    skill_count: a.skills.len(),
                    docid: a.docid,
                    name: a.name,
                    description: a.description,
                });
            }
        }
        Ok(out)
    }

    /// `agent-get`: the agent with its skills resolved (a deleted skill has `name: null`).
    pub fn agent_get(&self, docid: &str) -> Result<AgentDefinition> {
        let (doc, kbids) = self.document_record(docid)?;
        let not_agent = || KbError::NotFound(format!("Agent not found: {docid}"));
        if doc.doc_type != AGENT_TYPE {
            return Err(not_agent());
        }
        let meta: AgentMeta = doc
            .metadata
            .as_deref()
            .and_then(|m| serde_json::from_str(m).ok())
            .ok_or_else(not_agent)?;
        let mut skills = Vec::with_capacity(kbids.len());
        for (position, kbid) in kbids.into_iter().enumerate() {
            let name = self.skill_by_kbid(&kbid)?.map(|s| s.name);
            skills.push(AgentSkill {
                kbid,
                name,
                position,
            });
        }
        Ok(AgentDefinition {
            docid: docid.to_string(),
            name: meta.agent.name,
            description: meta.agent.description,
            persona: meta.agent.persona,
            skills,
        })
    }

    /// `agent-delete`: remove the agent document (its skills stay).
    pub fn agent_delete(&self, docid: &str) -> Result<bool> {
        self.agent_get(docid)?;
        self.remove_document(docid)
    }
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
