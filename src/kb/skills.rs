//! Skills and agents as stored sections and documents (`crate::skills` has their types).

use super::Kb;
use crate::error::{KbError, Result};
use crate::skills::*;

impl Kb {
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
        crate::types::kbid::validate_kbid("kbid", kbid)?;
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
        let removed = self.remove_section_keeping(kbid, AGENT_TYPE)?;
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
            crate::types::kbid::validate_kbid(&format!("skills[{i}]"), k)?;
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
        let docid = &*crate::types::validate::docid(docid)?;
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
