//! The OpenAPI 3.1 document served at `GET /v1/openapi.json`, built from the route table.
//!
//! Every route is a [`Route`] made with [`route!`]: its doc comment (first paragraph: the
//! summary; the rest: the description), an operation id, the method, the path and the handler.
//! The router ([`super::router`]) and the document's `paths` are both built from that one table
//! ([`super::routes`]), so neither can name a route the other lacks. What a route takes and
//! answers is read from its handler's signature ([`Documented`]): a `JsonBody<T>` argument is the
//! request body, a `Query<T>` the query parameters, a `Json<T>` answer the 200 reply. A handler
//! answering a bare `Response` (streams, bytes) says what it sends with [`Route::reply`],
//! [`Route::ndjson`] and [`Route::content`]. The error codes a route can answer are listed with
//! [`Route::errors`]; the codes an extractor brings are added by it (a malformed or unknown body
//! field is `INVALID_ARGUMENT`, a body over the limit `TOO_LARGE`). Schemas come from the
//! `schemars` derives of the request and reply types, their doc comments becoming descriptions.

use std::future::Future;
use std::sync::Arc;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{ConnectInfo, Path, Query, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use axum::routing::{MethodFilter, MethodRouter};
use axum::{Json, Router};
use schemars::generate::SchemaSettings;
use schemars::transform::RecursiveTransform;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{json, Map, Value};

use super::body::{JsonBody, JsonBytes};
use super::error::{status_of, ApiError, ErrorBody, StreamError};
use super::peer::Peer;
use super::AppState;
use crate::core::ErrorCode;

/// Makes a [`Route`]: `route!(/// Summary.\n///\n/// Description.\n "readFile": POST
/// "/v1/fs/read" => read)`, where `readFile` is the operation id.
macro_rules! route {
    ($(#[doc = $doc:literal])+ $id:literal: $method:ident $path:literal => $handler:expr) => {
        $crate::api::openapi::Route::new(
            axum::http::Method::$method,
            $path,
            $handler,
            $id,
            &[$($doc),+],
        )
    };
}
pub(super) use route;

/// Adds to an operation what a handler's signature, or the route table, says of it.
type Part = Box<dyn Fn(&mut Operation, &mut Schemas) + Send + Sync>;

/// One route of the API: how it is served and what the document says of it.
pub struct Route {
    method: Method,
    path: &'static str,
    handler: MethodRouter<Arc<AppState>>,
    id: &'static str,
    doc: &'static [&'static str],
    /// Paragraphs the route shares with others, after its own description.
    notes: Vec<&'static str>,
    parts: Vec<Part>,
}

impl Route {
    /// A route serving `handler`; its signature describes the request and the answer.
    pub fn new<H, T, A>(
        method: Method,
        path: &'static str,
        handler: H,
        id: &'static str,
        doc: &'static [&'static str],
    ) -> Route
    where
        H: axum::handler::Handler<T, Arc<AppState>> + Documented<A>,
        T: 'static,
        A: 'static,
    {
        let filter = MethodFilter::try_from(method.clone())
            .unwrap_or_else(|_| panic!("{method} {path}: not a method a route can take"));
        Route {
            method,
            path,
            handler: axum::routing::on(filter, handler),
            id,
            doc,
            notes: Vec::new(),
            parts: vec![Box::new(<H as Documented<A>>::document)],
        }
    }

    /// The method and the path, as the document writes them (`post`, `/v1/fs/read`).
    pub fn key(&self) -> (String, &'static str) {
        (self.method.as_str().to_ascii_lowercase(), self.path)
    }

    /// Serves the route on `router`.
    pub fn serve_on(self, router: Router<Arc<AppState>>) -> Router<Arc<AppState>> {
        router.route(self.path, self.handler)
    }

    /// Adds a paragraph the route shares with others to its description.
    pub fn describe(mut self, note: &'static str) -> Route {
        self.notes.push(note);
        self
    }

    /// Adds error codes the route can answer besides those its extractors bring.
    pub fn errors(self, codes: &'static [ErrorCode]) -> Route {
        self.part(move |op, _| op.errors.extend_from_slice(codes))
    }

    /// Adds a JSON answer of type `T` (for a handler answering a bare `Response`).
    pub fn reply<T: JsonSchema>(self) -> Route {
        self.part(|op, s| op.reply("application/json", s.reply::<T>()))
    }

    /// Adds the NDJSON answer (`"progress": true`), one `L` a line.
    pub fn ndjson<L: JsonSchema>(self) -> Route {
        self.part(|op, s| op.reply("application/x-ndjson", s.reply::<L>()))
    }

    /// Adds an answer in `media` of a fixed schema (bytes, text).
    pub fn content(self, media: &'static str, schema: Value) -> Route {
        self.part(move |op, _| op.reply(media, schema.clone()))
    }

    /// Adds the query parameters of `Q` (for a handler that reads its query itself).
    pub fn query<Q: JsonSchema>(self) -> Route {
        self.part(|op, s| op.parameters.extend(s.parameters::<Q>()))
    }

    /// Describes the path parameter `name` (the `{name}` of the route's path), whose values
    /// `schema` describes. Every `{…}` of a path must be described (the document panics
    /// otherwise).
    pub fn param(self, name: &'static str, description: &'static str, schema: Value) -> Route {
        self.part(move |op, _| {
            op.parameters.push(json!({
                "name": name, "in": "path", "required": true, "description": description,
                "schema": schema.clone(),
            }));
        })
    }

    /// Adds a request body in `media` of a fixed schema.
    pub fn body(self, media: &'static str, schema: Value, description: &'static str) -> Route {
        self.part(move |op, _| {
            op.request = Some(json!({
                "required": false,
                "description": description,
                "content": { media: { "schema": schema.clone() } },
            }));
        })
    }

    fn part(mut self, f: impl Fn(&mut Operation, &mut Schemas) + Send + Sync + 'static) -> Route {
        self.parts.push(Box::new(f));
        self
    }

    /// The route's operation object.
    fn operation(&self, s: &mut Schemas) -> Value {
        let mut op = Operation::default();
        for part in &self.parts {
            part(&mut op, s);
        }
        for name in path_params(self.path) {
            assert!(
                op.parameters
                    .iter()
                    .any(|p| p["in"] == "path" && p["name"] == name),
                "{} {}: the path parameter `{name}` is not described (Route::param)",
                self.method,
                self.path
            );
        }
        let (summary, mut description) = summary_and_description(self.doc);
        for note in &self.notes {
            description = format!("{description}\n\n{note}");
        }
        let mut out = json!({
            "operationId": self.id,
            "tags": [tag_of(self.path)],
            "summary": summary,
            "description": description,
            "responses": op.responses(s),
        });
        if !op.parameters.is_empty() {
            out["parameters"] = Value::Array(op.parameters);
        }
        if let Some(body) = op.request {
            out["requestBody"] = body;
        }
        out
    }
}

/// The names of the path parameters of a route's path (`/v1/forks/{name}`: `name`).
fn path_params(path: &str) -> impl Iterator<Item = &str> {
    path.split('/')
        .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
}

/// An operation as its parts put it together.
#[derive(Default)]
pub struct Operation {
    parameters: Vec<Value>,
    request: Option<Value>,
    /// The 200 answer's content: media type → `{schema}`.
    replies: Map<String, Value>,
    errors: Vec<ErrorCode>,
}

impl Operation {
    fn reply(&mut self, media: &str, schema: Value) {
        self.replies
            .insert(media.to_string(), json!({ "schema": schema }));
    }

    /// The responses: 200 and one per status of the error codes, each naming its codes.
    fn responses(&self, s: &Schemas) -> Value {
        let described = self
            .replies
            .values()
            .find_map(|c| s.description_of(&c["schema"]))
            .unwrap_or_else(|| "Success.".into());
        let mut out = Map::new();
        out.insert(
            "200".into(),
            json!({ "description": described, "content": self.replies }),
        );
        let mut statuses: Vec<StatusCode> = self.errors.iter().map(|c| status_of(*c)).collect();
        statuses.sort_unstable();
        statuses.dedup();
        for status in statuses {
            let codes: Vec<&str> = ErrorCode::ALL
                .iter()
                .filter(|c| self.errors.contains(c) && status_of(**c) == status)
                .map(|c| c.as_str())
                .collect();
            out.insert(status.as_str().into(), error_response(status, &codes));
        }
        Value::Object(out)
    }
}

/// The error response of `status`, whose body is an Error with one of `codes`.
fn error_response(status: StatusCode, codes: &[&str]) -> Value {
    let listed: Vec<String> = codes.iter().map(|c| format!("`{c}`")).collect();
    json!({
        "description": format!(
            "{}: {} (see ErrorCode)",
            status.canonical_reason().unwrap_or("Error"),
            listed.join(", ")
        ),
        "content": { "application/json": { "schema": {
            "allOf": [{ "$ref": "#/components/schemas/Error" }],
            "properties": { "code": { "enum": codes } },
        } } },
    })
}

/// The schemas of the document: requests as they are read, replies as they are written.
pub struct Schemas {
    requests: SchemaGenerator,
    replies: SchemaGenerator,
}

impl Schemas {
    fn new() -> Schemas {
        let settings = || {
            SchemaSettings::draft2020_12()
                .with(|s| {
                    s.definitions_path = "/components/schemas".into();
                    s.meta_schema = None;
                })
                .with_transform(RecursiveTransform(unwrap_description as fn(&mut Schema)))
        };
        Schemas {
            requests: settings().for_deserialize().into_generator(),
            replies: settings().for_serialize().into_generator(),
        }
    }

    fn request<T: JsonSchema>(&mut self) -> Value {
        self.requests.subschema_for::<T>().to_value()
    }

    fn reply<T: JsonSchema>(&mut self) -> Value {
        self.replies.subschema_for::<T>().to_value()
    }

    /// The query parameters of `Q`, a struct of optional scalars: one a field.
    fn parameters<Q: JsonSchema>(&mut self) -> Vec<Value> {
        let schema = Q::json_schema(&mut self.requests).to_value();
        let required = |name: &str| {
            schema["required"]
                .as_array()
                .is_some_and(|r| r.iter().any(|n| n == name))
        };
        let Some(fields) = schema["properties"].as_object() else {
            return Vec::new();
        };
        fields
            .iter()
            .map(|(name, field)| {
                let mut field = field.clone();
                let description = field
                    .as_object_mut()
                    .and_then(|f| f.remove("description"))
                    .and_then(|d| d.as_str().map(unwrap));
                // A query parameter is absent or has a value; it is never null.
                if let Some(types) = field.get_mut("type").and_then(Value::as_array_mut) {
                    types.retain(|t| t != "null");
                    if types.len() == 1 {
                        field["type"] = types[0].clone();
                    }
                }
                let mut p = json!({ "name": name, "in": "query", "required": required(name),
                                    "schema": field });
                if let Some(d) = description {
                    p["description"] = d.into();
                }
                p
            })
            .collect()
    }

    /// The description of the schema `schema` is or refers to.
    fn description_of(&self, schema: &Value) -> Option<String> {
        let named = schema["$ref"]
            .as_str()
            .and_then(|r| r.strip_prefix("#/components/schemas/"))
            .and_then(|name| self.replies.definitions().get(name));
        named.unwrap_or(schema)["description"].as_str().map(unwrap)
    }

    /// Every named schema. A name given to a request and a reply that differ is a mistake of
    /// the types (one needs `#[schemars(rename)]`) and panics, naming it.
    fn components(mut self) -> Map<String, Value> {
        let mut all = self.replies.take_definitions(true);
        for (name, schema) in self.requests.take_definitions(true) {
            match all.get(&name) {
                Some(reply) if *reply != schema => panic!(
                    "the schema {name} differs as a request ({schema}) and as a reply ({reply}); \
                     give one of the types another name with #[schemars(rename)]"
                ),
                _ => {
                    all.insert(name, schema);
                }
            }
        }
        all
    }
}

/// What a handler's signature tells the document: what its arguments (the extractors) and its
/// answer say, for handlers of up to five arguments.
pub trait Documented<A> {
    fn document(op: &mut Operation, s: &mut Schemas);
}

/// What an extractor tells the document (nothing, for the state and the peer).
pub trait DocumentedArg {
    fn document(_op: &mut Operation, _s: &mut Schemas) {}
}

/// What a handler's answer tells the document (nothing, for a bare `Response`).
pub trait DocumentedAnswer {
    fn document(_op: &mut Operation, _s: &mut Schemas) {}
}

macro_rules! documented {
    ($($arg:ident),*) => {
        impl<F, Fut, $($arg),*> Documented<($($arg,)*)> for F
        where
            F: FnOnce($($arg),*) -> Fut,
            Fut: Future,
            Fut::Output: DocumentedAnswer,
            $($arg: DocumentedArg,)*
        {
            fn document(op: &mut Operation, s: &mut Schemas) {
                $(<$arg as DocumentedArg>::document(op, s);)*
                <Fut::Output as DocumentedAnswer>::document(op, s);
            }
        }
    };
}
documented!();
documented!(A1);
documented!(A1, A2);
documented!(A1, A2, A3);
documented!(A1, A2, A3, A4);
documented!(A1, A2, A3, A4, A5);

impl DocumentedArg for State<Arc<AppState>> {}
impl DocumentedArg for ConnectInfo<Peer> {}
impl DocumentedArg for HeaderMap {}
impl DocumentedArg for RawQuery {}
impl DocumentedArg for axum::body::Body {}

impl<T: JsonSchema> DocumentedArg for JsonBody<T> {
    fn document(op: &mut Operation, s: &mut Schemas) {
        document_json_body::<T>(op, s);
    }
}

impl<T: JsonSchema> DocumentedArg for JsonBytes<T> {
    fn document(op: &mut Operation, s: &mut Schemas) {
        document_json_body::<T>(op, s);
    }
}

/// A JSON body of type `T`, and the codes reading one can answer.
fn document_json_body<T: JsonSchema>(op: &mut Operation, s: &mut Schemas) {
    op.request = Some(json!({
        "required": true,
        "description": "A JSON object (parsed as JSON whatever the Content-Type header says). \
                        Unknown fields are refused with INVALID_ARGUMENT; a body over \
                        2 × `limits.max_write_bytes` + 64 KiB with TOO_LARGE; BUSY when the \
                        bodies being read take all of `limits.body_memory_bytes` for longer \
                        than `limits.body_memory_wait_secs`.",
        "content": { "application/json": { "schema": s.request::<T>() } },
    }));
    op.errors.extend([
        ErrorCode::InvalidArgument,
        ErrorCode::TooLarge,
        ErrorCode::Busy,
    ]);
}

impl<T: JsonSchema> DocumentedArg for Result<Query<T>, QueryRejection> {
    fn document(op: &mut Operation, s: &mut Schemas) {
        op.parameters.extend(s.parameters::<T>());
        op.errors.push(ErrorCode::InvalidArgument);
    }
}

/// A path parameter (described by [`Route::param`]); one that is not valid UTF-8 once decoded
/// is INVALID_ARGUMENT.
impl<T> DocumentedArg for Result<Path<T>, PathRejection> {
    fn document(op: &mut Operation, _s: &mut Schemas) {
        op.errors.push(ErrorCode::InvalidArgument);
    }
}

impl<T: JsonSchema> DocumentedAnswer for Json<T> {
    fn document(op: &mut Operation, s: &mut Schemas) {
        op.reply("application/json", s.reply::<T>());
    }
}

impl<T: JsonSchema> DocumentedAnswer for Result<Json<T>, ApiError> {
    fn document(op: &mut Operation, s: &mut Schemas) {
        <Json<T> as DocumentedAnswer>::document(op, s);
        op.errors.push(ErrorCode::Internal);
    }
}

impl DocumentedAnswer for Response {}

impl DocumentedAnswer for Result<Response, ApiError> {
    fn document(op: &mut Operation, _s: &mut Schemas) {
        op.errors.push(ErrorCode::Internal);
    }
}

/// One line of a streamed answer (`"progress": true`, `application/x-ndjson`): progress lines,
/// then exactly one `result` or `error` line. Once the stream has begun the HTTP status stays
/// 200, so read the last line; only a malformed body is still refused with a plain JSON error.
// Describes the lines the streaming routes write as JSON values; never built itself.
#[allow(dead_code)]
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "{T}Line")]
pub enum StreamLine<P, T> {
    /// How far the operation has got (at most ten a second, plus one when a phase completes).
    Progress(P),
    /// The answer the route gives without `progress`.
    Result(T),
    /// Why the operation failed.
    Error(StreamError),
}

/// Splits a doc comment into its first paragraph and the rest, each paragraph on one line.
fn summary_and_description(doc: &[&str]) -> (String, String) {
    let lines: Vec<&str> = doc
        .iter()
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    let text = unwrap(&lines.join("\n"));
    let (summary, rest) = text.split_once("\n\n").unwrap_or((&text, ""));
    (summary.to_string(), rest.to_string())
}

/// Joins the lines of each paragraph of a doc comment (they were wrapped for the source, not
/// for the reader).
fn unwrap(text: &str) -> String {
    let paragraphs: Vec<String> = text
        .split("\n\n")
        .map(|p| p.trim().replace('\n', " "))
        .filter(|p| !p.is_empty())
        .collect();
    paragraphs.join("\n\n")
}

/// Unwraps a schema's description (see [`unwrap`]).
fn unwrap_description(schema: &mut Schema) {
    if let Some(Value::String(d)) = schema.get_mut("description") {
        *d = unwrap(d);
    }
}

/// The groups of routes, in the document's order, with what each holds.
const TAGS: [(&str, &str); 7] = [
    (
        "system",
        "Health, status, the change journal and its events, garbage collection, metrics and this \
         document.",
    ),
    (
        "files",
        "Reading, writing and managing files and directories in the zones.",
    ),
    ("search", "glob (find paths) and grep (search contents)."),
    (
        "git",
        "Git sync: pull a repository into the workspace, see what changed, stage the changes as \
         reviewable commits; a person reviews them and pushes (or discards). Config: the `[git]` \
         section (docs/config.md).",
    ),
    (
        "sandboxes",
        "Remote sandboxes: those attached (sandbox-agent) and those wardfs makes itself (`local`, \
         `daytona`), their sessions, and mirroring a zone to and from a directory inside one. \
         Config: `[sandboxes.<name>]` (docs/config.md).",
    ),
    (
        "checkpoints",
        "Snapshots of a zone that every writer's changes reach (API, MCP, the mount, git and \
         mirror pulls, changes beside wardfs), and restoring one. Config: `[checkpoints]` \
         (docs/config.md).",
    ),
    (
        "forks",
        "Forks: a copy-on-write zone of its own per agent (`/forks/NAME`), made from the \
         workspace, another fork or a checkpoint; its changes listed against its fork point and \
         merged back into its parent three-way (docs/forks.md).",
    ),
];

/// The tag of a route, by its path.
fn tag_of(path: &str) -> &'static str {
    let area = path.strip_prefix("/v1/").unwrap_or(path);
    match area.split('/').next().unwrap_or("") {
        "fs" if area == "fs/glob" || area == "fs/grep" => "search",
        "fs" => "files",
        "git" => "git",
        "sandboxes" | "mirror" => "sandboxes",
        "checkpoints" => "checkpoints",
        "forks" => "forks",
        _ => "system",
    }
}

/// What the document says before the routes.
const INTRODUCTION: &str = "wardfs is a local-first virtual filesystem daemon for AI agents. \
This API gives file operations shaped for agents (line-window reads, exact-string edits, \
ripgrep-style grep, newest-first glob) over two zones: `/workspace` (the project) and `/cache` \
(downloads and scratch). Git sync (`/v1/git/...`) pulls a repository branch into `/workspace`, \
tracks what the agent changed, and stages the changes as commits for a person to review and push.

**Transport.** HTTP/1.1 over a Unix socket, by default `$XDG_RUNTIME_DIR/wardfs/wardfs.sock` \
(config key `socket`). The host name in URLs is ignored; use `http://wardfs`, e.g. \
`curl --unix-socket $XDG_RUNTIME_DIR/wardfs/wardfs.sock http://wardfs/v1/health`.

**Auth.** None in HTTP: the socket is mode 0600 in a 0700 directory, and every connection's peer \
uid is checked with SO_PEERCRED. Only the daemon's own uid and the uids in `api.allowed_uids` are \
served; others are disconnected before any HTTP is read.

**Requests.** File operations are `POST` with a JSON object body, parsed as JSON whatever the \
Content-Type (so `curl -d '{...}'` works). Unknown fields, missing required fields and wrong types \
are refused with INVALID_ARGUMENT. Request bodies are limited to 2 × `limits.max_write_bytes` + \
64 KiB (about 200 MiB by default); a larger body is answered with 413 TOO_LARGE. Raw bytes go \
through `GET`/`PUT /v1/fs/raw?path=...`. Pull and push (git and mirror) can stream their progress \
as NDJSON (`\"progress\": true`); `GET /v1/events` streams the journal's changes.

**Paths.** Virtual paths start with `/workspace`, `/cache` or a fork's `/forks/NAME` (see \
`/v1/forks`; a missing leading slash is tolerated; repeated slashes and `.` are dropped; `..` is \
folded but may never climb above the zone root). `/` is the top level holding the zones. Unknown zones, NUL bytes, names over 255 bytes \
and paths over 4096 bytes are INVALID_PATH. Symlinks are followed only while they stay inside \
their zone; anything that would leave the zone is OUTSIDE_ZONE.

**Writes** (write, raw PUT, edit, move) are atomic: a temp file beside the destination renamed \
over it. Every change is recorded in the journal (`GET /v1/log`).

**Limits** (config `[limits]`, defaults): `max_read_bytes` 10485760 (largest text file `read` \
returns whole, largest window), `max_write_bytes` 104857600 (largest file written), \
`grep_max_results` 1000, `glob_max_results` 1000.

**Errors.** Every error is JSON `{\"code\", \"message\", \"path\"}` (`path` only when the error is \
about one). Branch on `code`, never on `message`; the ErrorCode schema says what each code means, \
and each route lists the codes it can answer under their HTTP status. An unknown route gives 400 \
INVALID_ARGUMENT; a known route with the wrong method gives 405 INVALID_ARGUMENT (the `Allow` \
header names the methods it takes). The CLI's exit code for each error code is in docs/api.md.";

/// Builds the document of `routes`.
pub fn document(routes: &[Route]) -> Value {
    let mut schemas = Schemas::new();
    // The error body is named `Error`; every error response refers to it.
    schemas.reply::<ErrorBody>();
    let mut paths = Map::new();
    for r in routes {
        let (method, path) = r.key();
        let item = paths.entry(path).or_insert_with(|| json!({}));
        item[method] = r.operation(&mut schemas);
    }
    let status_table: String = ErrorCode::ALL
        .iter()
        .map(|c| format!("| `{c}` | {} |\n", status_of(*c).as_u16()))
        .collect();
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "wardfs API",
            "version": env!("CARGO_PKG_VERSION"),
            "summary": "Local-first virtual filesystem for AI agents, over a Unix socket.",
            "description": format!("{INTRODUCTION}\n\n| code | HTTP |\n|---|---|\n{status_table}"),
            "license": { "name": "Apache-2.0", "identifier": "Apache-2.0" },
        },
        "servers": [{
            "url": "http://wardfs",
            "description": "The daemon's Unix socket (default `$XDG_RUNTIME_DIR/wardfs/wardfs.sock`, \
                            or `/tmp/wardfs-<uid>/wardfs.sock` without XDG_RUNTIME_DIR). The host \
                            name is not used; connect to the socket.",
        }],
        "tags": TAGS.map(|(name, d)| json!({ "name": name, "description": d })),
        "paths": paths,
        "components": { "schemas": schemas.components() },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::routes;

    /// The operation objects of a document, by (method, path).
    fn operations(doc: &Value) -> Vec<(String, String, &Value)> {
        let mut out = Vec::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("a path item") {
                out.push((method.clone(), path.clone(), op));
            }
        }
        out
    }

    #[test]
    fn every_route_of_the_table_is_documented_once_with_a_summary_and_an_answer() {
        let table = routes();
        let doc = document(&table);
        let mut keys: Vec<_> = table.iter().map(Route::key).collect();
        keys.sort();
        let before = keys.len();
        keys.dedup();
        assert_eq!(keys.len(), before, "a route is in the table twice");
        assert_eq!(
            operations(&doc).len(),
            table.len(),
            "the document has other routes"
        );
        for (method, path) in keys {
            let op = &doc["paths"][path][&method];
            for field in ["operationId", "summary", "description"] {
                assert!(
                    op[field].as_str().is_some_and(|s| !s.is_empty()),
                    "{method} {path} has no {field}"
                );
            }
            assert!(
                op["responses"]["200"]["content"]
                    .as_object()
                    .is_some_and(|c| !c.is_empty()),
                "{method} {path} says nothing of its answer"
            );
        }
    }

    #[test]
    fn a_code_a_route_description_names_is_among_the_codes_it_lists() {
        let doc = document(&routes());
        for (method, path, op) in operations(&doc) {
            let listed: Vec<&str> = op["responses"]
                .as_object()
                .unwrap()
                .iter()
                .filter(|(status, _)| *status != "200")
                .flat_map(|(_, r)| {
                    r["content"]["application/json"]["schema"]["properties"]["code"]["enum"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|c| c.as_str().unwrap())
                })
                .collect();
            let text = op["description"].as_str().unwrap();
            for code in ErrorCode::ALL.map(ErrorCode::as_str) {
                let named = text
                    .match_indices(code)
                    .any(|(i, _)| !text[i + code.len()..].starts_with('_'));
                assert!(
                    !named || listed.contains(&code),
                    "{method} {path} names {code} but does not list it: {listed:?}"
                );
            }
        }
    }

    #[test]
    fn error_statuses_follow_the_code_map_and_extractors_bring_their_codes() {
        let doc = document(&routes());
        let read = &doc["paths"]["/v1/fs/read"]["post"]["responses"];
        let codes = |status: &str| {
            read[status]["content"]["application/json"]["schema"]["properties"]["code"]["enum"]
                .clone()
        };
        // A JSON body: a malformed one, one over the limit, one finding no room in the budget.
        assert_eq!(codes("400"), json!(["INVALID_PATH", "INVALID_ARGUMENT"]));
        assert_eq!(codes("413"), json!(["TOO_LARGE"]));
        // `Result<Json<_>, ApiError>`: a worker that fails.
        assert_eq!(codes("500"), json!(["INTERNAL"]));
        assert_eq!(
            codes("503"),
            json!(["ZONE_UNAVAILABLE", "SANDBOX_UNAVAILABLE", "BUSY"])
        );
        // A query struct gives the parameters, without null.
        let log = &doc["paths"]["/v1/log"]["get"];
        let limit = log["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "limit")
            .expect("limit is a parameter of /v1/log");
        assert_eq!(limit["schema"]["type"], "integer");
        assert_eq!(limit["required"], false);
        assert!(log["responses"]["400"].is_object());
        // An unreachable git remote is its own code and status.
        let pull = &doc["paths"]["/v1/git/pull"]["post"]["responses"];
        assert_eq!(
            pull["502"]["content"]["application/json"]["schema"]["properties"]["code"]["enum"],
            json!(["REMOTE_UNAVAILABLE"])
        );
        assert!(pull["200"]["content"]["application/x-ndjson"].is_object());
    }

    #[test]
    fn every_reference_names_a_schema_of_the_document() {
        fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
            match v {
                Value::Object(m) => {
                    if let Some(Value::String(r)) = m.get("$ref") {
                        out.push(r);
                    }
                    m.values().for_each(|v| refs(v, out));
                }
                Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
                _ => {}
            }
        }
        let doc = document(&routes());
        let mut found = Vec::new();
        refs(&doc, &mut found);
        assert!(found.len() > 50, "{} references", found.len());
        for r in found {
            let name = r
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("{r} is not a reference to a component"));
            assert!(
                doc["components"]["schemas"][name].is_object(),
                "{r} names no schema"
            );
        }
    }

    #[test]
    fn doc_comments_lose_their_wrapping_but_keep_their_paragraphs() {
        let (summary, description) = summary_and_description(&[
            " Read a file",
            "",
            " One line",
            " and its end.",
            "",
            " Two.",
        ]);
        assert_eq!(summary, "Read a file");
        assert_eq!(description, "One line and its end.\n\nTwo.");
    }
}
