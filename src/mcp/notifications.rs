//! Notifications and subscriptions: which resources a session follows, the daemon's change
//! events followed (and followed again when they stop), and their translation into
//! `notifications/resources/updated`, `.../list_changed`, `notifications/prompts/list_changed`
//! and log messages.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::*;
use rmcp::{ErrorData as McpError, Peer, RoleServer};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::resources::{document_uri, section_uri};
use super::server::{Kbdb, State, internal};
use crate::error::Result;
use crate::skills::SkillDefinition;

/// Most resources one session may subscribe to at a time (docs/mcp.md).
pub const MAX_SUBSCRIPTIONS: usize = 1000;
/// Longest URI a session may subscribe to, in bytes: room for any kbdb URI (a docid is at most
/// 256 bytes), while a session's subscriptions stay within a few MiB.
pub const MAX_SUBSCRIPTION_URI_BYTES: usize = 4096;

pub(super) enum Event {
    /// A change committed by any process.
    Changed(crate::types::ChangeEvent),
    /// The daemon's change events were lost (it stopped or dropped us) and are followed again:
    /// whatever changed in between is not known.
    Resubscribed,
    Log(LoggingLevel, Value),
}

fn level_rank(l: LoggingLevel) -> u8 {
    match l {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

impl Kbdb {
    pub(super) async fn subscribe_to(
        &self,
        request: SubscribeRequestParams,
    ) -> std::result::Result<(), McpError> {
        // Any URI may be subscribed (one that does not exist yet notifies when it appears),
        // within the limits: a client cannot make the server hold unbounded memory.
        if request.uri.len() > MAX_SUBSCRIPTION_URI_BYTES {
            return Err(McpError::invalid_params(
                format!(
                    "uri: is {} bytes; the limit for a subscription is {MAX_SUBSCRIPTION_URI_BYTES} bytes",
                    request.uri.len()
                ),
                Some(json!({"limit": MAX_SUBSCRIPTION_URI_BYTES})),
            ));
        }
        let mut s = self.state.subscriptions.lock().map_err(internal)?;
        if s.len() >= MAX_SUBSCRIPTIONS && !s.contains(&request.uri) {
            return Err(McpError::invalid_params(
                format!(
                    "uri: this session already has {MAX_SUBSCRIPTIONS} subscriptions, the limit; \
                     unsubscribe from some first"
                ),
                Some(json!({"limit": MAX_SUBSCRIPTIONS})),
            ));
        }
        s.insert(request.uri);
        Ok(())
    }

    pub(super) async fn unsubscribe_from(
        &self,
        request: UnsubscribeRequestParams,
    ) -> std::result::Result<(), McpError> {
        if let Ok(mut s) = self.state.subscriptions.lock() {
            s.remove(&request.uri);
        }
        Ok(())
    }
}

/// Pass the daemon's change events on to the notifier until it is gone. When they stop (the
/// daemon stopped, was replaced, or dropped a subscriber that fell behind), subscribe again —
/// starting a daemon if none runs — after a pause that starts at 0.1 s and doubles (up to 10 s)
/// while attempts fail or end at once without an event (a daemon that drops every subscriber
/// at once must not make this loop spin), and tell the notifier that changes may have been
/// missed.
pub(super) fn follow_changes(
    state: &State,
    first: Result<crate::daemon::client::Client>,
    tx: &mpsc::UnboundedSender<Event>,
) {
    let mut subscription = first;
    let mut pause = Duration::from_millis(100);
    loop {
        match subscription {
            Ok(mut sub) => {
                let began = std::time::Instant::now();
                loop {
                    match sub.next_event() {
                        Ok(e) => {
                            pause = Duration::from_millis(100);
                            if tx.send(Event::Changed(e)).is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            tracing::info!("change events stopped ({e}); subscribing again");
                            break;
                        }
                    }
                }
                // A subscription that lasted (an idle daemon that exited) was not a failure.
                if began.elapsed() >= Duration::from_secs(10) {
                    pause = Duration::from_millis(100);
                }
            }
            Err(e) => {
                tracing::warn!(
                    "cannot subscribe to change events ({e}); retrying in {} ms",
                    pause.as_millis()
                );
            }
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(10));
        if tx.is_closed() {
            return;
        }
        subscription = state.pool.subscription();
        if subscription.is_ok() && tx.send(Event::Resubscribed).is_err() {
            return;
        }
    }
}

/// The kbids of the skills the database holds now (empty if the daemon cannot say).
async fn skill_kbids(state: &Arc<State>) -> HashSet<String> {
    let state = state.clone();
    tokio::task::spawn_blocking(move || state.pool.call("skills", json!({})))
        .await
        .ok()
        .and_then(|r| r.ok())
        .and_then(|v| serde_json::from_value::<Vec<SkillDefinition>>(v).ok())
        .map(|skills| skills.into_iter().map(|s| s.kbid).collect())
        .unwrap_or_default()
}

/// Turns daemon change events and log requests into MCP notifications.
pub(super) async fn notifier(
    peer: Peer<RoleServer>,
    state: Arc<State>,
    mut rx: mpsc::UnboundedReceiver<Event>,
) {
    let mut known_docs: Option<HashSet<String>> = None;
    // The skills (prompts) there are: a removed section is a prompt gone only if it was one.
    let mut known_skills = skill_kbids(&state).await;
    while let Some(ev) = rx.recv().await {
        let res = match ev {
            Event::Changed(crate::types::ChangeEvent {
                kind,
                id,
                section_type,
                ..
            }) => {
                let uri = if kind.starts_with("section") {
                    section_uri(&id)
                } else {
                    document_uri(&id)
                };
                let subscribed = state
                    .subscriptions
                    .lock()
                    .map(|s| s.contains(&uri))
                    .unwrap_or(false);
                if subscribed
                    && let Err(e) = peer
                        .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                        .await
                {
                    tracing::debug!("notification failed: {e}");
                    break;
                }
                // The list of documents (resources) or of skills/agents (prompts) changed.
                let mut list_changed = false;
                if kind.starts_with("document") {
                    let docs = known_docs.get_or_insert_with(HashSet::new);
                    list_changed = if kind == "document_removed" {
                        docs.remove(&id)
                    } else {
                        docs.insert(id.clone())
                    };
                }
                if list_changed {
                    let _ = peer.notify_resource_list_changed().await;
                }
                // The prompts are the skills, the agents and one per model: only a change of
                // one of those changes their list (an agent's description, a skill's
                // arguments), not any other write.
                let prompts_changed = match kind.as_str() {
                    "section_added" | "section_changed" => {
                        section_type.as_deref() == Some(crate::skills::SKILL_TYPE)
                            && (known_skills.insert(id.clone()) || kind == "section_changed")
                    }
                    "section_removed" => known_skills.remove(&id),
                    "document_changed" | "document_removed" => {
                        id.starts_with(crate::skills::AGENT_DOCID_PREFIX)
                    }
                    _ => false,
                };
                if prompts_changed {
                    let _ = peer.notify_prompt_list_changed().await;
                }
                if kind == "models_changed" {
                    // New models: new `create-<model>` prompts, a new schema and summary.
                    let _ = peer.notify_prompt_list_changed().await;
                    for uri in ["kbdb://schema", "kbdb://models-summary", "kbdb://primer"] {
                        let subscribed = state
                            .subscriptions
                            .lock()
                            .map(|s| s.contains(uri))
                            .unwrap_or(false);
                        if subscribed {
                            let _ = peer
                                .notify_resource_updated(ResourceUpdatedNotificationParam::new(
                                    uri.to_string(),
                                ))
                                .await;
                        }
                    }
                }
                Ok(())
            }
            Event::Resubscribed => {
                // Changes made while nobody listened are unknown: every subscribed resource
                // and both lists may have changed.
                known_skills = skill_kbids(&state).await;
                let uris: Vec<String> = state
                    .subscriptions
                    .lock()
                    .map(|s| s.iter().cloned().collect())
                    .unwrap_or_default();
                for uri in uris {
                    let _ = peer
                        .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                        .await;
                }
                let _ = peer.notify_resource_list_changed().await;
                let _ = peer.notify_prompt_list_changed().await;
                Ok(())
            }
            Event::Log(level, data) => {
                let min = state.log_level.lock().ok().and_then(|l| *l);
                if min.is_some_and(|m| level_rank(level) < level_rank(m)) {
                    continue;
                }
                peer.notify_logging_message(
                    LoggingMessageNotificationParam::new(level, data).with_logger("kbdb"),
                )
                .await
            }
        };
        if let Err(e) = res {
            tracing::debug!("notification failed: {e}");
            break;
        }
    }
}
