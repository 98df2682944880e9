//! MCP resources: the collection's static resources, one per document, and the templates
//! (section, document, model instance, document section), each read through a daemon method.

use rmcp::ErrorData as McpError;
use rmcp::model::*;
use serde_json::{Value, json};

use super::server::{Kbdb, internal};
use crate::text::markers::percent_decode;

/// Page size of `resources/list`.
const PAGE: usize = 100;

/// The collection's static resources: URI, name, MIME type, description.
const COLLECTION_RESOURCES: &[(&str, &str, &str, &str)] = &[
    (
        "kbdb://schema",
        "schema",
        "application/json",
        "JSON schema of all registered models — fields, sections, relationships, document counts",
    ),
    (
        "kbdb://toc",
        "toc",
        "text/markdown",
        "Markdown table of contents for all documents in the collection",
    ),
    (
        "kbdb://models-summary",
        "models-summary",
        "text/markdown",
        "Generated MODELS.md describing all model definitions with attributes, sections, and relationships",
    ),
    (
        "kbdb://primer",
        "primer",
        "text/markdown",
        "Combined teach output — workflow, models summary, query guide and table of contents",
    ),
];

pub(super) fn section_uri(kbid: &str) -> String {
    format!("kbdb://section/{kbid}")
}

pub(super) fn document_uri(docid: &str) -> String {
    format!("kbdb://document/{docid}")
}

impl Kbdb {
    pub(super) async fn resources_list(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> std::result::Result<ListResourcesResult, McpError> {
        let start = match request.and_then(|r| r.cursor) {
            None => 0,
            Some(c) => c
                .parse::<usize>()
                .map_err(|_| McpError::invalid_params(format!("invalid cursor {c:?}"), None))?,
        };
        let docs: Vec<crate::DocumentSummary> =
            self.call_as("docs", json!({})).await.map_err(internal)?;
        let mut page: Vec<Resource> = Vec::new();
        if start == 0 {
            for (uri, name, mime, description) in COLLECTION_RESOURCES {
                page.push(
                    Resource::new(*uri, *name)
                        .with_mime_type(*mime)
                        .with_description(*description),
                );
            }
        }
        page.extend(docs.iter().skip(start).take(PAGE).map(|d| {
            let mut r = Resource::new(document_uri(&d.docid), d.docid.clone())
                .with_mime_type("application/json");
            if let Some(t) = &d.title {
                r = r.with_title(t.clone());
            }
            r.with_description(format!(
                "{} section(s), updated {}",
                d.sections, d.updated_at
            ))
        }));
        let mut result = ListResourcesResult::with_all_items(page);
        if start + PAGE < docs.len() {
            result.next_cursor = Some((start + PAGE).to_string());
        }
        Ok(result)
    }

    pub(super) async fn resource_templates(
        &self,
    ) -> std::result::Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new("kbdb://section/{kbid}", "section")
                .with_description("Section by kb-id")
                .with_mime_type("text/plain"),
            ResourceTemplate::new("kbdb://document/{docid}", "document")
                .with_description("Document + sections")
                .with_mime_type("application/json"),
            ResourceTemplate::new("kbdb://models/{model}/{docid}", "model-instance")
                .with_description(
                    "Typed document: metadata, sections by heading, relationships, validation",
                )
                .with_mime_type("application/json"),
            ResourceTemplate::new(
                "kbdb://document/{docid}/sections/{heading}",
                "document-section",
            )
            .with_description("One section of a document, by heading (case-insensitive)")
            .with_mime_type("text/markdown"),
        ]))
    }

    pub(super) async fn resource_read(
        &self,
        request: ReadResourceRequestParams,
    ) -> std::result::Result<ReadResourceResponse, McpError> {
        let uri = request.uri;
        let not_found =
            || McpError::resource_not_found("Resource not found", Some(json!({"uri": uri})));
        if let Some(kbid) = uri.strip_prefix("kbdb://section/") {
            let v: Vec<crate::RetrievedSection> =
                match self.call_as("retrieve", json!({"kbid": kbid})).await {
                    Ok(v) => v,
                    Err(_) => return Err(not_found()),
                };
            let s = v.into_iter().next().ok_or_else(not_found)?;
            let contents = if s.section_type.starts_with("image/") {
                ResourceContents::blob(s.content, uri.clone()).with_mime_type(s.section_type)
            } else {
                ResourceContents::text(s.content, uri.clone()).with_mime_type(s.section_type)
            };
            return Ok(ReadResourceResult::new(vec![contents]).into());
        }
        let text = |body: String, mime: &str| -> ReadResourceResponse {
            ReadResourceResult::new(vec![
                ResourceContents::text(body, uri.clone()).with_mime_type(mime.to_string()),
            ])
            .into()
        };
        let static_method = match uri.as_str() {
            "kbdb://schema" => Some("schema"),
            "kbdb://toc" => Some("toc"),
            "kbdb://models-summary" => Some("models_summary"),
            "kbdb://primer" => Some("primer"),
            _ => None,
        };
        if let Some(m) = static_method {
            return match self.call(m, json!({})).await.map_err(internal)? {
                Value::String(s) => Ok(text(s, "text/markdown")),
                v => Ok(text(
                    serde_json::to_string_pretty(&v).map_err(internal)?,
                    "application/json",
                )),
            };
        }
        if let Some(rest) = uri.strip_prefix("kbdb://models/")
            && let Some((model, docid)) = rest.split_once('/')
        {
            let v = self
                .call("model_instance", json!({"model": model, "docid": docid}))
                .await
                .map_err(|_| not_found())?;
            return Ok(text(
                serde_json::to_string_pretty(&v).map_err(internal)?,
                "application/json",
            ));
        }
        if let Some(rest) = uri.strip_prefix("kbdb://document/")
            && let Some((docid, heading)) = rest.rsplit_once("/sections/")
        {
            let heading = percent_decode(heading);
            let v = self
                .call(
                    "section_by_heading",
                    json!({"docid": docid, "heading": heading}),
                )
                .await
                .map_err(|_| not_found())?;
            return Ok(text(
                v.as_str().unwrap_or_default().to_string(),
                "text/markdown",
            ));
        }
        if let Some(docid) = uri.strip_prefix("kbdb://document/") {
            let doc = match self.call("retrieve", json!({"docid": docid})).await {
                Ok(v) => v,
                Err(_) => return Err(not_found()),
            };
            let kbids: Vec<String> =
                serde_json::from_value(doc["kbids"].clone()).unwrap_or_default();
            let sections: Vec<crate::RetrievedSection> = if kbids.is_empty() {
                Vec::new()
            } else {
                self.call_as("retrieve_many", json!({"kbids": kbids}))
                    .await
                    .map_err(internal)?
            };
            let mut body = doc;
            body["sections"] = json!(sections
                .iter()
                .enumerate()
                .map(|(position, s)| json!({"position": position, "kbid": s.kbid, "type": s.section_type, "content": s.content}))
                .collect::<Vec<_>>());
            let text = serde_json::to_string_pretty(&body).map_err(internal)?;
            return Ok(ReadResourceResult::new(vec![
                ResourceContents::text(text, uri.clone()).with_mime_type("application/json"),
            ])
            .into());
        }
        Err(not_found())
    }
}
