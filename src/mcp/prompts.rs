//! MCP prompts and completion: the collection's prompts (`create-<model>`, `review-document`,
//! `teach`, `query-guide`), one per skill and one per agent (`agent:<name>`), and the values
//! `completion/complete` suggests.

use rmcp::ErrorData as McpError;
use rmcp::model::*;
use serde_json::{Value, json};

use super::server::{Kbdb, internal};
use crate::skills::{AgentDefinition, AgentSummary, SkillDefinition};

/// The `review-document` prompt text: the document, its validation, what to do.
fn review_text(doc: &Value, v: &Value) -> String {
    let issues = |key: &str| -> Vec<String> {
        v[key]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                format!(
                    "- {}: {}",
                    e["path"].as_str().unwrap_or(""),
                    e["message"].as_str().unwrap_or("")
                )
            })
            .collect()
    };
    let (errors, warnings) = (issues("errors"), issues("warnings"));
    format!(
        "Review the document \"{}\" ({}).\n\n## Model: {}\n## Validation: {} error(s)\n{}\n{}\n\n## Current Frontmatter\n{}\n\n## Outline\n{}\n\n## Document Content\n{}\n\nPlease suggest fixes for validation errors and check that all sections are complete. Make changes with `update_section` or `update_document`, then `validate`.",
        doc["title"].as_str().unwrap_or(""),
        doc["id"].as_str().unwrap_or(""),
        doc["model"].as_str().unwrap_or(""),
        errors.len(),
        errors.join("\n"),
        if warnings.is_empty() {
            String::new()
        } else {
            format!("Warnings:\n{}", warnings.join("\n"))
        },
        serde_json::to_string_pretty(&doc["meta"]).unwrap_or_default(),
        doc["outline"].as_str().unwrap_or(""),
        doc["content"].as_str().unwrap_or(""),
    )
}

impl Kbdb {
    pub(super) async fn prompts_list(&self) -> std::result::Result<ListPromptsResult, McpError> {
        let skills: Vec<SkillDefinition> =
            self.call_as("skills", json!({})).await.map_err(internal)?;
        let agents: Vec<AgentSummary> = self
            .call_as("agent_list", json!({}))
            .await
            .map_err(internal)?;
        let mut prompts: Vec<Prompt> = skills
            .into_iter()
            .map(|s| {
                let args = s
                    .arguments
                    .into_iter()
                    .map(|a| {
                        let mut p = PromptArgument::new(a.name).with_required(a.required);
                        if let Some(d) = a.description {
                            p = p.with_description(d);
                        }
                        p
                    })
                    .collect();
                Prompt::new(s.name, Some(s.description), Some(args))
            })
            .collect();
        prompts.extend(agents.into_iter().map(|a| {
            Prompt::new(
                format!("agent:{}", a.name),
                Some(a.description),
                Some(Vec::new()),
            )
        }));
        // The collection's prompts come first: one `create-<model>` per model, then the guides.
        let schema = self.call("schema", json!({})).await.map_err(internal)?;
        let mut collection: Vec<Prompt> = schema["models"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["name"] != "Base")
            .map(|m| {
                let name = m["name"].as_str().unwrap_or_default();
                Prompt::new(
                    format!("create-{}", name.to_lowercase()),
                    Some(format!(
                        "Guide creation of a new {name} document with proper schema and sections"
                    )),
                    Some(vec![
                        PromptArgument::new("title")
                            .with_required(true)
                            .with_description(format!("Title for the new {name}")),
                    ]),
                )
            })
            .collect();
        collection.push(Prompt::new(
            "review-document",
            Some("Fetch a document, run validation, and present it for review"),
            Some(vec![
                PromptArgument::new("pathId")
                    .with_required(true)
                    .with_description("The document's id (docid)"),
            ]),
        ));
        collection.push(Prompt::new(
            "teach",
            Some(
                "Full collection documentation — workflow, models, query guide and table of \
                 contents. For a quick-start behavioral guide, use the `read_me` tool instead.",
            ),
            Some(Vec::new()),
        ));
        collection.push(Prompt::new(
            "query-guide",
            Some("Show available models, fields, and query operators to help build queries"),
            Some(vec![
                PromptArgument::new("intent")
                    .with_required(true)
                    .with_description("What you're trying to find (natural language)"),
            ]),
        ));
        let taken: std::collections::HashSet<String> =
            collection.iter().map(|p| p.name.to_string()).collect();
        collection.extend(
            prompts
                .into_iter()
                .filter(|p| !taken.contains(&p.name.to_string())),
        );
        Ok(ListPromptsResult::with_all_items(collection))
    }

    pub(super) async fn prompt_get(
        &self,
        request: GetPromptRequestParams,
    ) -> std::result::Result<GetPromptResponse, McpError> {
        let unknown = || {
            McpError::invalid_params(
                format!("Unknown prompt: {}", request.name),
                Some(json!({"name": request.name})),
            )
        };
        let args = request.arguments.clone().unwrap_or_default();
        let arg = |name: &str| -> std::result::Result<String, McpError> {
            args.get(name)
                .and_then(Value::as_str)
                .map(str::to_string)
                .or_else(|| {
                    (name == "pathId")
                        .then(|| {
                            args.get("docid")
                                .and_then(Value::as_str)
                                .map(str::to_string)
                        })
                        .flatten()
                })
                .ok_or_else(|| {
                    McpError::invalid_params(
                        format!("{name}: is required by prompt {}", request.name),
                        Some(json!({"name": request.name})),
                    )
                })
        };
        let user = |text: String, description: String| -> GetPromptResponse {
            GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
                .with_description(description)
                .into()
        };
        match request.name.as_str() {
            "teach" => {
                let text = self.call("primer", json!({})).await.map_err(internal)?;
                return Ok(user(
                    text.as_str().unwrap_or_default().to_string(),
                    "Full collection documentation".into(),
                ));
            }
            "query-guide" => {
                let intent = arg("intent")?;
                let guide = self
                    .call("query_guide", json!({}))
                    .await
                    .map_err(internal)?;
                return Ok(user(
                    format!(
                        "{}\n\n## What to find\n\n{intent}\n\nBuild a `query` tool call (model, where, sort, select) that finds it.",
                        guide.as_str().unwrap_or_default()
                    ),
                    "Help construct a query".into(),
                ));
            }
            "review-document" => {
                let docid = arg("pathId")?;
                let doc = self
                    .call("document_json", json!({"docid": docid}))
                    .await
                    .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
                let v = self
                    .call("validate", json!({"target": docid}))
                    .await
                    .map_err(internal)?;
                return Ok(user(review_text(&doc, &v), "Review a document".into()));
            }
            name => {
                if let Some(model) = name.strip_prefix("create-") {
                    let title = arg("title")?;
                    if let Ok(text) = self
                        .call("create_prompt", json!({"model": model, "title": title}))
                        .await
                    {
                        return Ok(user(
                            text.as_str().unwrap_or_default().to_string(),
                            format!("Create a {model} document"),
                        ));
                    }
                }
            }
        }
        if let Some(agent) = request.name.strip_prefix("agent:") {
            let a: AgentDefinition = self
                .call_as(
                    "agent_get",
                    json!({"docid": format!("{}{agent}", crate::skills::AGENT_DOCID_PREFIX)}),
                )
                .await
                .map_err(|_| unknown())?;
            let mut listing = String::from("Available skills:");
            for s in &a.skills {
                match &s.name {
                    Some(n) => {
                        let d: Option<SkillDefinition> = self
                            .call_as("skill_get", json!({"kbid": s.kbid}))
                            .await
                            .ok();
                        listing.push_str(&format!(
                            "\n- {n}: {}",
                            d.map(|d| d.description).unwrap_or_default()
                        ));
                    }
                    None => listing.push_str(&format!("\n- {} (deleted)", s.kbid)),
                }
            }
            return Ok(GetPromptResult::new(vec![
                PromptMessage::new_text(Role::Assistant, a.persona),
                PromptMessage::new_text(Role::User, listing),
            ])
            .with_description(a.description)
            .into());
        }
        let skill: SkillDefinition = self
            .call_as("skill_get", json!({"name": request.name}))
            .await
            .map_err(|_| unknown())?;
        let values = request.arguments.unwrap_or_default();
        let text = crate::skills::render(&skill.body, &skill.arguments, &values).map_err(|e| {
            McpError::invalid_params(e.to_string(), Some(json!({"name": request.name})))
        })?;
        Ok(
            GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
                .with_description(skill.description)
                .into(),
        )
    }

    pub(super) async fn completion(
        &self,
        request: CompleteRequestParams,
    ) -> std::result::Result<CompleteResult, McpError> {
        let prefix = request.argument.value.clone();
        let values: Vec<String> = match &request.r#ref {
            Reference::Prompt(p) => {
                // Prompt argument values: the names of documents for a `docid`-like argument,
                // else nothing to suggest; argument names are offered for an empty value.
                let skills: Vec<SkillDefinition> =
                    self.call_as("skills", json!({})).await.unwrap_or_default();
                match skills.into_iter().find(|s| s.name == p.name) {
                    Some(s) if request.argument.name.contains("docid") => {
                        let docs: Vec<crate::DocumentSummary> =
                            self.call_as("docs", json!({})).await.unwrap_or_default();
                        let _ = s;
                        docs.into_iter()
                            .map(|d| d.docid)
                            .filter(|d| d.starts_with(&prefix))
                            .collect()
                    }
                    Some(s) => s
                        .arguments
                        .into_iter()
                        .map(|a| a.name)
                        .filter(|n| n.starts_with(&prefix) && n != &request.argument.name)
                        .collect(),
                    None => {
                        // Not a skill: complete prompt names (skills and `agent:` prompts).
                        let agents: Vec<AgentSummary> = self
                            .call_as("agent_list", json!({}))
                            .await
                            .unwrap_or_default();
                        let skills: Vec<SkillDefinition> =
                            self.call_as("skills", json!({})).await.unwrap_or_default();
                        skills
                            .into_iter()
                            .map(|s| s.name)
                            .chain(agents.into_iter().map(|a| format!("agent:{}", a.name)))
                            .filter(|n| n.starts_with(&prefix))
                            .collect()
                    }
                }
            }
            Reference::Resource(r) => {
                if r.uri.starts_with("kbdb://document/") || request.argument.name == "docid" {
                    let docs: Vec<crate::DocumentSummary> =
                        self.call_as("docs", json!({})).await.unwrap_or_default();
                    docs.into_iter()
                        .map(|d| d.docid)
                        .filter(|d| d.starts_with(&prefix))
                        .collect()
                } else {
                    self.call_as("kbids_with_prefix", json!({"prefix": prefix, "limit": 100}))
                        .await
                        .unwrap_or_default()
                }
            }
            _ => Vec::new(),
        };
        let mut values = values;
        values.sort();
        values.dedup();
        values.truncate(100);
        let info = CompletionInfo::with_all_values(values)
            .map_err(|e| McpError::internal_error(e, None))?;
        Ok(CompleteResult::new(info))
    }
}
