//! `kbdb skill …` and `kbdb agent …`: the MCP skill and agent tools for people.

use kbdb::KbError;
use kbdb::daemon::operations::op;
use kbdb::daemon::params::{
    AgentInput, AgentParams, NoParams, SkillDeleteParams, SkillGetParams, SkillLearnParams,
};
use serde_json::Value;

use super::args::{AgentAction, Format, SkillAction};
use super::backend::Backend;
use super::output::{EXIT_OK, print_json, print_text};

fn show(format: Format, v: &Value, text: String) {
    match format {
        Format::Json => print_json(v, true),
        Format::Text => print_text(&text),
    }
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or("")
}

pub fn skill(kb: &Backend, format: Format, action: SkillAction) -> Result<i32, KbError> {
    match action {
        SkillAction::Learn {
            name,
            description,
            body,
            file,
        } => {
            let body = match (body, file) {
                (Some(b), _) => b,
                (None, Some(p)) if p.as_os_str() != "-" => std::fs::read_to_string(&p)
                    .map_err(|e| KbError::io(format!("cannot read {}", p.display()), e))?,
                _ => {
                    let mut text = String::new();
                    std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                        .map_err(|e| KbError::io("cannot read standard input", e))?;
                    text
                }
            };
            let v = kb.run(
                op::SKILL_LEARN,
                &SkillLearnParams {
                    name,
                    description,
                    arguments: None,
                    body: Some(body),
                },
            )?;
            let args: Vec<&str> = v["arguments"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x["name"].as_str()).collect())
                .unwrap_or_default();
            let args = if args.is_empty() {
                "none".to_string()
            } else {
                args.join(", ")
            };
            let text = format!(
                "learned skill {} {} (arguments: {args})",
                s(&v, "name"),
                s(&v, "kbid")
            );
            show(format, &v, text);
        }
        SkillAction::List => {
            let v = kb.run(op::SKILL_LIST, &NoParams {})?;
            let lines: Vec<String> = v
                .as_array()
                .into_iter()
                .flatten()
                .map(|x| {
                    format!(
                        "{}\t{}\t{} argument(s)\t{}",
                        s(x, "name"),
                        s(x, "kbid"),
                        x["argumentCount"],
                        s(x, "description")
                    )
                })
                .collect();
            show(format, &v, lines.join("\n"));
        }
        SkillAction::Get { name, kbid } => {
            let v = kb.run(op::SKILL_GET, &SkillGetParams { name, kbid })?;
            let text = format!(
                "{} ({})\n{}\n\n{}",
                s(&v, "name"),
                s(&v, "kbid"),
                s(&v, "description"),
                s(&v, "body")
            );
            show(format, &v, text);
        }
        SkillAction::Delete { kbid } => {
            let v = kb.run(op::SKILL_DELETE, &SkillDeleteParams { kbid: kbid.clone() })?;
            show(format, &v, format!("deleted skill {kbid}"));
        }
    }
    Ok(EXIT_OK)
}

fn describe_agent(v: &Value) -> String {
    let mut out = format!(
        "{} ({})\n{}\npersona: {}",
        s(v, "name"),
        s(v, "docid"),
        s(v, "description"),
        s(v, "persona")
    );
    for k in v["skills"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "\n  {}. {} {}",
            k["position"].as_u64().unwrap_or(0) + 1,
            s(k, "kbid"),
            k["name"].as_str().unwrap_or("(deleted)")
        ));
    }
    out
}

pub fn agent(kb: &Backend, format: Format, action: AgentAction) -> Result<i32, KbError> {
    match action {
        AgentAction::Create {
            name,
            description,
            persona,
            skills,
        } => {
            let v = kb.run(
                op::AGENT_CREATE,
                &AgentInput {
                    name,
                    description,
                    persona,
                    skills,
                },
            )?;
            show(format, &v, describe_agent(&v));
        }
        AgentAction::List => {
            let v = kb.run(op::AGENT_LIST, &NoParams {})?;
            let lines: Vec<String> = v
                .as_array()
                .into_iter()
                .flatten()
                .map(|x| {
                    format!(
                        "{}\t{}\t{} skill(s)\t{}",
                        s(x, "docid"),
                        s(x, "name"),
                        x["skillCount"],
                        s(x, "description")
                    )
                })
                .collect();
            show(format, &v, lines.join("\n"));
        }
        AgentAction::Get { docid } => {
            let v = kb.run(op::AGENT_GET, &AgentParams { docid })?;
            show(format, &v, describe_agent(&v));
        }
        AgentAction::Delete { docid } => {
            let v = kb.run(
                op::AGENT_DELETE,
                &AgentParams {
                    docid: docid.clone(),
                },
            )?;
            show(format, &v, format!("deleted agent {docid}"));
        }
    }
    Ok(EXIT_OK)
}
