//! The schema against the writer, and every shipped SQL query against the schema.
//!
//! The queries are read from the repository: the fenced `sql` blocks of README.md, docs/
//! and ops/grafana/README.md, the targets of the Grafana dashboard and the queries of the
//! Grafana alert rules. Each is checked by a small SQL reader ([`check`]) that knows the
//! Analytics Engine SQL dialect only as far as these queries use it, and refuses what it
//! does not know, so that a query it cannot read fails instead of passing unchecked. No
//! network: nothing is sent to the SQL API.

use super::*;
use crate::core::edge_rules::log::{LineContext, RequestLog, StorageCalls};
use crate::core::edge_rules::scope::ScopeLog;
use crate::core::primitives::jwt::Unverified;
use crate::core::vocabulary::decision::Decision;
use crate::core::vocabulary::trace::Trace;
use std::fs;
use std::path::Path;

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    fs::read_to_string(&full).unwrap_or_else(|error| panic!("{}: {error}", full.display()))
}

// ---------------------------------------------------------------------------------------
// The schema against the writer
// ---------------------------------------------------------------------------------------

/// A line in which every field has a value no other field has, so that each column shows
/// which field the writer put there.
#[test]
fn every_field_lands_in_the_column_the_schema_names() {
    let line = RequestLog {
        object: Some("0123456789abcdef".into()),
        decision: Decision::Rejected(ProblemKind::KeyReused),
        status: 201,
        origin_status: Some(202),
        origin_ms: Some(203),
        wait_ms: Some(204),
        edge_ms: Some(205),
        object_calls: Some(206),
        storage: Some(StorageCalls { reads: 207, writes: 208 }),
        scope: Some(ScopeLog { kind: ScopeKind::Credential, unverified: Some(Unverified::Expired) }),
    };
    let trace = Trace { request_id: "8f1c2a3b4d5e6f70-AMS".into(), method: "PATCH".into(), route: None };
    let context = LineContext {
        mode: Mode::Observe,
        route: Some("/v1/charges*"),
        trace: Some(&trace),
        version: Some("v-42"),
    };
    let expected_text = |field: Field| match field {
        Field::Decision => "rejected",
        Field::Problem => "key-reused",
        Field::Object => "0123456789abcdef",
        Field::Mode => "observe",
        Field::Route => "/v1/charges*",
        Field::Scope => "credential",
        Field::Unverified => "expired",
        Field::Method => "PATCH",
        Field::RequestId => "8f1c2a3b4d5e6f70-AMS",
        Field::Version => "v-42",
        _ => unreachable!("{field:?} is a number"),
    };
    let expected_number = |field: Field| match field {
        Field::Status => 201.0,
        Field::OriginStatus => 202.0,
        Field::OriginMs => 203.0,
        Field::WaitMs => 204.0,
        Field::EdgeMs => 205.0,
        Field::ObjectCalls => 206.0,
        Field::StorageReads => 207.0,
        Field::StorageWrites => 208.0,
        _ => unreachable!("{field:?} is text"),
    };
    let point = line.data_point_in(context);
    assert_eq!(point.index, expected_text(INDEX.field), "{}", INDEX.name);
    for (column, blob) in BLOBS.iter().zip(&point.blobs) {
        assert_eq!(blob, expected_text(column.field), "{}", column.name);
    }
    for (column, double) in DOUBLES.iter().zip(&point.doubles) {
        assert_eq!(*double, expected_number(column.field), "{}", column.name);
    }
    // And an absent field is what the schema says: empty text, 0 or -1.
    let bare = RequestLog::new(None, Decision::Executed, 201, None).data_point();
    let absent = |field: Field| bare.blobs[BLOBS.iter().position(|c| c.field == field).unwrap()].clone();
    for field in [
        Field::Problem,
        Field::Object,
        Field::Route,
        Field::Scope,
        Field::Unverified,
        Field::Method,
        Field::RequestId,
        Field::Version,
    ] {
        assert_eq!(absent(field), "", "{field:?}");
        assert!(field.values().is_none_or(|values| values.contains(&"")), "{field:?} can be empty");
    }
    let number = |field: Field| bare.doubles[DOUBLES.iter().position(|c| c.field == field).unwrap()];
    assert_eq!(
        (number(Field::OriginStatus), number(Field::OriginMs), number(Field::WaitMs)),
        (0.0, -1.0, -1.0)
    );
    // A count the line does not carry is -1, never 0 (0 is a count: a replay's storage).
    assert_eq!(
        (number(Field::ObjectCalls), number(Field::StorageReads), number(Field::StorageWrites)),
        (-1.0, -1.0, -1.0)
    );
}

#[test]
fn every_field_has_one_column_and_every_column_a_name_of_its_kind() {
    for field in Field::ALL {
        let holders: Vec<&str> =
            BLOBS.iter().chain(DOUBLES.iter()).filter(|c| c.field == field).map(|c| c.name).collect();
        assert_eq!(holders.len(), 1, "{field:?} is in {holders:?}");
    }
    for (i, column) in BLOBS.iter().enumerate() {
        assert_eq!(column.name, format!("blob{}", i + 1));
    }
    for (i, column) in DOUBLES.iter().enumerate() {
        assert_eq!(column.name, format!("double{}", i + 1));
    }
    // Every value a token column holds is one the writer can write, and names no other
    // kind: `rejected:key-reused` (a decision token) is never a decision column's value.
    let decisions = Field::Decision.values().unwrap();
    assert!(decisions.contains(&"rejected") && decisions.contains(&"failed-open"));
    assert!(!decisions.iter().any(|d| d.contains(':')));
}

/// The column table in docs/operations.md is the schema, row for row.
#[test]
fn the_operations_guide_lists_the_columns_the_worker_writes() {
    let doc = read("docs/operations.md");
    let rows: Vec<&str> = doc
        .lines()
        .skip_while(|line| line.trim() != "| column | content |")
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .collect();
    let expected: Vec<String> =
        columns().map(|column| format!("| `{}` | {} |", column.name, column.meaning)).collect();
    assert_eq!(rows, expected, "docs/operations.md's column table is not core::edge_rules::metrics_schema's");
}

// ---------------------------------------------------------------------------------------
// A reader for the SQL the queries use
// ---------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Num(String),
    /// A Grafana macro or variable, `$name`, that survived substitution.
    Macro(String),
    Sym(&'static str),
}

impl Tok {
    fn is_word(&self, word: &str) -> bool {
        matches!(self, Tok::Ident(name) if name.eq_ignore_ascii_case(word))
    }

    fn is_sym(&self, sym: &str) -> bool {
        matches!(self, Tok::Sym(s) if *s == sym)
    }
}

fn tokenize(sql: &str) -> Result<Vec<Tok>, String> {
    const SYMBOLS: [&str; 17] =
        ["<=", ">=", "<>", "!=", "==", "(", ")", ",", "=", "<", ">", "+", "-", "*", "/", "%", "."];
    let chars: Vec<char> = sql.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    let word = |from: usize| -> usize {
        let mut end = from;
        while end < chars.len() && (chars[end].is_ascii_alphanumeric() || chars[end] == '_') {
            end += 1;
        }
        end
    };
    while i < chars.len() {
        let c = chars[i];
        let rest: String = chars[i..chars.len().min(i + 2)].iter().collect();
        if c.is_whitespace() {
            i += 1;
        } else if rest == "--" {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '\'' {
            let mut text = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err("a string literal is not closed".into()),
                    Some('\'') if chars.get(i + 1) == Some(&'\'') => {
                        text.push('\'');
                        i += 2;
                    }
                    Some('\'') => break,
                    Some('\\') => return Err("backslash escapes are not read here".into()),
                    Some(&other) => {
                        text.push(other);
                        i += 1;
                    }
                }
            }
            i += 1;
            tokens.push(Tok::Str(text));
        } else if c == '$' {
            let end = word(i + 1);
            if end == i + 1 {
                return Err("a `$` without a name (write `$name`, not `${name}`)".into());
            }
            tokens.push(Tok::Macro(chars[i + 1..end].iter().collect()));
            i = end;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let end = word(i);
            tokens.push(Tok::Ident(chars[i..end].iter().collect()));
            i = end;
        } else if c.is_ascii_digit() {
            let mut end = i;
            while end < chars.len() && (chars[end].is_ascii_digit() || chars[end] == '.') {
                end += 1;
            }
            tokens.push(Tok::Num(chars[i..end].iter().collect()));
            i = end;
        } else if let Some(sym) = SYMBOLS.iter().find(|sym| rest.starts_with(**sym)) {
            tokens.push(Tok::Sym(sym));
            i += sym.len();
        } else {
            return Err(format!("`{c}` is not read here (quoted identifiers, `;` and the like)"));
        }
    }
    Ok(tokens)
}

/// Words of the dialect that are neither columns nor functions.
const KEYWORDS: [&str; 33] = [
    "SELECT", "FROM", "WHERE", "GROUP", "BY", "HAVING", "ORDER", "LIMIT", "OFFSET", "AS", "AND", "OR", "NOT",
    "IN", "BETWEEN", "LIKE", "ILIKE", "ASC", "DESC", "INTERVAL", "SECOND", "MINUTE", "HOUR", "DAY", "WEEK",
    "MONTH", "FORMAT", "JSON", "ALL", "DISTINCT", "NULL", "TRUE", "FALSE",
];

/// The functions of the Analytics Engine SQL reference these queries may call
/// (developers.cloudflare.com/analytics/analytics-engine/sql-reference/).
const FUNCTIONS: [&str; 18] = [
    "sum",
    "sumIf",
    "min",
    "max",
    "quantileExactWeighted",
    "argMax",
    "topKWeighted",
    "if",
    "intDiv",
    "toUInt32",
    "toDateTime",
    "toStartOfInterval",
    "toUnixTimestamp",
    "now",
    "round",
    "floor",
    "ceil",
    "formatDateTime",
];

/// Functions that are valid SQL but wrong here, with what to write instead. Analytics
/// Engine samples rows: each row stands for `_sample_interval` rows, so an unweighted
/// aggregate undercounts exactly the busy periods a dashboard is for.
const REFUSED_FUNCTIONS: [(&str, &str); 7] = [
    ("count", "counts a sampled row once; write sum(_sample_interval)"),
    ("countIf", "counts a sampled row once; write sumIf(_sample_interval, condition)"),
    ("avg", "weighs a sampled row once; write sum(_sample_interval * x) / sum(_sample_interval)"),
    ("avgIf", "weighs a sampled row once; write sumIf(_sample_interval * x, c) / sumIf(_sample_interval, c)"),
    ("quantile", "weighs a sampled row once; write quantileExactWeighted(q)(x, _sample_interval)"),
    ("median", "weighs a sampled row once; write quantileExactWeighted(0.5)(x, _sample_interval)"),
    (
        "quantileWeighted",
        "is the legacy name, which takes (q, x, weight); write quantileExactWeighted(q)(x, _sample_interval)",
    ),
];

/// Columns every Analytics Engine dataset has besides the written ones.
const BUILT_IN: [&str; 2] = ["timestamp", "_sample_interval"];

/// Grafana macros of the Altinity ClickHouse data source that the dashboard and the alert
/// rules use (`$timeSeries`: the time bucket; `$timeFilter`: the panel's time range).
const GRAFANA_MACROS: [&str; 2] = ["timeSeries", "timeFilter"];

/// The columns a query is checked against: the worker's ([`Schema::current`]), or another
/// in the test that shows a changed writer breaks the shipped queries.
struct Schema {
    columns: Vec<Column>,
}

impl Schema {
    fn current() -> Schema {
        Schema { columns: columns().copied().collect() }
    }

    fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|column| column.name == name)
    }
}

/// Looks like a column of the dataset (`blob3`, `double12`, `index1`), written or not.
fn is_dataset_column(name: &str) -> bool {
    ["blob", "double", "index"].iter().any(|prefix| {
        name.strip_prefix(prefix).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// The field an alias names: the longest field name it is, or ends with after `_`
/// (`origin_ms`, `p99_origin_ms`; `origin_status` names `origin_status`, not `status`).
fn field_named_by(alias: &str) -> Option<Field> {
    Field::ALL
        .into_iter()
        .filter(|field| alias == field.name() || alias.ends_with(&format!("_{}", field.name())))
        .max_by_key(|field| field.name().len())
}

/// The problems of one query, empty when it reads only what the worker writes.
/// `macros`: the `$name`s it may still hold (the dashboard's and alerts' Grafana macros).
fn check(sql: &str, schema: &Schema, datasets: &[String], macros: &[&str]) -> Vec<String> {
    let tokens = match tokenize(sql) {
        Ok(tokens) => tokens,
        Err(error) => return vec![error],
    };
    let mut problems = Vec::new();
    let column_of = |tok: &Tok, aliases: &[(String, &'static str)]| -> Option<Column> {
        let Tok::Ident(name) = tok else { return None };
        let name =
            aliases.iter().find(|(alias, _)| alias == name).map_or(name.as_str(), |(_, column)| column);
        schema.column(name).copied()
    };

    // Aliases (`… AS name`), and those that rename one column (`blob2 AS problem`).
    let mut aliases: Vec<String> = Vec::new();
    let mut renamed: Vec<(String, &'static str)> = Vec::new();
    for (i, tok) in tokens.iter().enumerate() {
        if !tok.is_word("AS") {
            continue;
        }
        let Some(Tok::Ident(alias)) = tokens.get(i + 1) else {
            problems.push("`AS` without a name after it".into());
            continue;
        };
        aliases.push(alias.clone());
        let starts_item = i >= 2 && (tokens[i - 2].is_word("SELECT") || tokens[i - 2].is_sym(","));
        if let (true, Some(column)) = (starts_item, column_of(&tokens[i - 1], &[])) {
            renamed.push((alias.clone(), column.name));
        }
    }

    // Every name is a keyword, a known function, a written column, a built-in column, an
    // alias, or the dataset after FROM.
    let mut names_a_table = false;
    for (i, tok) in tokens.iter().enumerate() {
        match tok {
            Tok::Macro(name) if !macros.contains(&name.as_str()) => {
                problems.push(format!("`${name}` is not a macro this query may use"));
            }
            Tok::Ident(name) => {
                let after_from = i > 0 && tokens[i - 1].is_word("FROM");
                let called = tokens.get(i + 1).is_some_and(|next| next.is_sym("("));
                if after_from {
                    names_a_table = true;
                    if !datasets.contains(name) {
                        problems.push(format!(
                            "FROM {name}: wrangler.toml binds no such dataset (it binds {datasets:?})"
                        ));
                    }
                } else if KEYWORDS.iter().any(|k| name.eq_ignore_ascii_case(k)) {
                    // `IN (`, `AND (`: a keyword before a parenthesis is not a call.
                } else if called {
                    if let Some((_, why)) =
                        REFUSED_FUNCTIONS.iter().find(|(f, _)| name.eq_ignore_ascii_case(f))
                    {
                        problems.push(format!("{name}() {why}"));
                    } else if !FUNCTIONS.iter().any(|f| name.eq_ignore_ascii_case(f)) {
                        problems.push(format!("{name}() is not an Analytics Engine SQL function read here"));
                    }
                } else if is_dataset_column(name) {
                    if schema.column(name).is_none() {
                        problems.push(format!("{name} is never written by the worker"));
                    }
                } else if !BUILT_IN.contains(&name.as_str()) && !aliases.contains(name) {
                    problems.push(format!("`{name}` is not a column, an alias or a function"));
                }
            }
            _ => {}
        }
    }
    if !names_a_table {
        problems.push("the query reads FROM no dataset".into());
    }
    if !tokens.iter().any(|t| t.is_word("timestamp") || matches!(t, Tok::Macro(m) if m == "timeFilter")) {
        problems.push("the query does not bound `timestamp` (or use `$timeFilter`)".into());
    }
    let aggregates = tokens
        .iter()
        .any(|t| ["sum", "sumIf", "quantileExactWeighted", "topKWeighted"].iter().any(|f| t.is_word(f)));
    if aggregates && !tokens.iter().any(|t| t.is_word("_sample_interval")) {
        problems.push("an aggregate that is not weighted by _sample_interval".into());
    }

    // Every literal a column is compared with is a value that column holds.
    let literal_at = |at: usize| -> Option<Tok> {
        match (tokens.get(at), tokens.get(at + 1)) {
            (Some(Tok::Sym("-")), Some(Tok::Num(n))) => Some(Tok::Num(format!("-{n}"))),
            (Some(lit @ (Tok::Str(_) | Tok::Num(_))), _) => Some(lit.clone()),
            _ => None,
        }
    };
    let check_value = |column: &Column, literal: &Tok, problems: &mut Vec<String>| match literal {
        Tok::Num(n) if !column.field.is_number() => problems
            .push(format!("{} holds text ({}), compared with the number {n}", column.name, column.meaning)),
        Tok::Str(s) if column.field.is_number() => {
            problems.push(format!("{} holds a number ({}), compared with '{s}'", column.name, column.meaning))
        }
        Tok::Str(s) => {
            if let Some(values) = column.field.values().filter(|values| !values.contains(&s.as_str())) {
                problems.push(format!(
                    "{} ({}) never holds '{s}'; it holds one of {values:?}",
                    column.name, column.meaning
                ));
            }
        }
        _ => {}
    };
    for (i, tok) in tokens.iter().enumerate() {
        let comparison = ["=", "==", "!=", "<>", "<", ">", "<=", ">="].iter().any(|op| tok.is_sym(op));
        if comparison && i > 0 {
            if let (Some(column), Some(literal)) = (column_of(&tokens[i - 1], &renamed), literal_at(i + 1)) {
                check_value(&column, &literal, &mut problems);
            }
            if let (Some(literal), Some(column)) =
                (literal_at(i - 1), tokens.get(i + 1).and_then(|t| column_of(t, &renamed)))
            {
                check_value(&column, &literal, &mut problems);
            }
        }
        if tok.is_word("IN") && i > 0 {
            let subject = if tokens[i - 1].is_word("NOT") { i.checked_sub(2) } else { Some(i - 1) };
            let Some(column) = subject.and_then(|at| column_of(&tokens[at], &renamed)) else { continue };
            if !tokens.get(i + 1).is_some_and(|t| t.is_sym("(")) {
                problems.push(format!("{} IN without a list", column.name));
                continue;
            }
            let mut at = i + 2;
            loop {
                let Some(literal) = literal_at(at) else {
                    problems.push(format!("{} IN (…) holds something other than literals", column.name));
                    break;
                };
                check_value(&column, &literal, &mut problems);
                at += if matches!(literal, Tok::Num(ref n) if n.starts_with('-')) { 2 } else { 1 };
                match tokens.get(at) {
                    Some(Tok::Sym(",")) => at += 1,
                    Some(Tok::Sym(")")) => break,
                    _ => {
                        problems.push(format!("{} IN (…) is not a list of literals", column.name));
                        break;
                    }
                }
            }
        }
        if (tok.is_word("LIKE") || tok.is_word("ILIKE")) && i > 0 {
            let subject = if tokens[i - 1].is_word("NOT") { i.checked_sub(2) } else { Some(i - 1) };
            if let Some(column) = subject.and_then(|at| column_of(&tokens[at], &renamed)) {
                if column.field.values().is_some() {
                    problems.push(format!(
                        "{} LIKE: compare a token column with = or IN, so that its values are checked",
                        column.name
                    ));
                }
            }
        }
    }

    // An alias that names a field (`p99_origin_ms`, `problem`) is computed from that field's
    // column, whenever its expression reads a column at all.
    let mut depth = 0usize;
    let mut item_start: Option<usize> = None;
    let mut select_depths: Vec<usize> = Vec::new();
    for (i, tok) in tokens.iter().enumerate() {
        if tok.is_sym("(") {
            depth += 1;
        } else if tok.is_sym(")") {
            depth = depth.saturating_sub(1);
        } else if tok.is_word("SELECT") {
            select_depths.push(depth);
            item_start = Some(i + 1);
        } else if tok.is_word("FROM") && select_depths.last() == Some(&depth) {
            select_depths.pop();
            item_start = None;
        } else if tok.is_sym(",") && select_depths.last() == Some(&depth) {
            item_start = Some(i + 1);
        } else if tok.is_word("AS") && select_depths.last() == Some(&depth) {
            let (Some(start), Some(Tok::Ident(alias))) = (item_start, tokens.get(i + 1)) else { continue };
            let Some(field) = field_named_by(alias) else { continue };
            let read: Vec<Column> = tokens[start..i].iter().filter_map(|t| column_of(t, &renamed)).collect();
            if !read.is_empty() && !read.iter().any(|column| column.field == field) {
                let names: Vec<&str> = read.iter().map(|c| c.name).collect();
                problems.push(format!(
                    "`{alias}` names the field {}, but its expression reads {names:?}",
                    field.name()
                ));
            }
        }
    }
    problems
}

// ---------------------------------------------------------------------------------------
// Where the queries are
// ---------------------------------------------------------------------------------------

/// The datasets `wrangler.toml` binds as [`BINDING`], in every environment.
fn bound_datasets() -> Vec<String> {
    let toml = read("wrangler.toml");
    let mut datasets = Vec::new();
    let mut section: Option<(Option<String>, Option<String>)> = None;
    let value = |line: &str, key: &str| -> Option<String> {
        let (name, value) = line.split_once('=')?;
        (name.trim() == key).then(|| value.trim().trim_matches('"').to_owned())
    };
    let mut flush = |section: &mut Option<(Option<String>, Option<String>)>| {
        if let Some((Some(binding), dataset)) = section.take() {
            if binding == BINDING {
                // Without `dataset`, the dataset is named after the binding.
                datasets.push(dataset.unwrap_or(binding));
            }
        }
    };
    for line in toml.lines().map(str::trim).filter(|line| !line.starts_with('#')) {
        if line.starts_with('[') {
            flush(&mut section);
            if line.ends_with("analytics_engine_datasets]]") {
                section = Some((None, None));
            }
        } else if let Some((binding, dataset)) = section.as_mut() {
            if let Some(found) = value(line, "binding") {
                *binding = Some(found);
            }
            if let Some(found) = value(line, "dataset") {
                *dataset = Some(found);
            }
        }
    }
    flush(&mut section);
    assert!(!datasets.is_empty(), "wrangler.toml binds no {BINDING} dataset");
    datasets
}

/// The fenced `sql` blocks of a Markdown file.
fn sql_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        let fence = line.trim_start();
        match current.as_mut() {
            None if fence.starts_with("```sql") => current = Some(String::new()),
            Some(_) if fence.starts_with("```") => blocks.extend(current.take()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

const DASHBOARD: &str = "ops/grafana/dashboards/idempotency-edge.json";
const ALERTS: &str = "ops/grafana/provisioning/alerting/idempotency-edge.yaml";
const DATASOURCE: &str = "ops/grafana/provisioning/datasources/analytics-engine.yaml";
/// The Grafana plugin that talks to the SQL API (Cloudflare's guide recommends it).
const PLUGIN: &str = "vertamedia-clickhouse-datasource";

/// Every panel of the dashboard, rows' collapsed panels included.
fn panels(dashboard: &serde_json::Value) -> Vec<&serde_json::Value> {
    let mut out = Vec::new();
    let mut stack: Vec<&serde_json::Value> =
        dashboard["panels"].as_array().map(|p| p.iter().collect()).unwrap_or_default();
    while let Some(panel) = stack.pop() {
        if let Some(inner) = panel["panels"].as_array() {
            stack.extend(inner);
        }
        out.push(panel);
    }
    out
}

/// The dashboard's queries, by panel title, as written (with `$dataset`).
fn dashboard_queries() -> Vec<(String, String)> {
    let dashboard: serde_json::Value = serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON");
    let mut queries = Vec::new();
    for panel in panels(&dashboard) {
        let title = panel["title"].as_str().unwrap_or_default().to_owned();
        for target in panel["targets"].as_array().into_iter().flatten() {
            let query =
                target["query"].as_str().unwrap_or_else(|| panic!("{title}: a target without a query"));
            queries.push((title.clone(), query.to_owned()));
        }
    }
    queries
}

/// The `query: |` block scalars of the alert rules. Any other `query:` form fails, so no
/// query is left unchecked by this reader, which is not a YAML parser.
fn alert_queries() -> Vec<(String, String)> {
    let yaml = read(ALERTS);
    let lines: Vec<&str> = yaml.lines().collect();
    let mut queries = Vec::new();
    let mut title = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        if let Some(t) = trimmed.strip_prefix("- title:").or_else(|| trimmed.strip_prefix("title:")) {
            title = t.trim().trim_matches('"').to_owned();
        }
        if let Some(form) = trimmed.strip_prefix("query:") {
            assert_eq!(
                form.trim(),
                "|",
                "{ALERTS}: `{title}` writes its query as `query: |` and an indented block"
            );
            let indent = line.len() - trimmed.len();
            let mut query = String::new();
            i += 1;
            while i < lines.len()
                && (lines[i].trim().is_empty() || lines[i].len() - lines[i].trim_start().len() > indent)
            {
                query.push_str(lines[i].trim());
                query.push('\n');
                i += 1;
            }
            queries.push((title.clone(), query));
            continue;
        }
        i += 1;
    }
    queries
}

fn report(failures: Vec<String>) {
    assert!(failures.is_empty(), "{} problem(s):\n{}", failures.len(), failures.join("\n"));
}

// ---------------------------------------------------------------------------------------
// The checks
// ---------------------------------------------------------------------------------------

#[test]
fn the_documented_queries_read_what_the_worker_writes() {
    let datasets = bound_datasets();
    let schema = Schema::current();
    let mut failures = Vec::new();
    let mut files = vec!["README.md".to_owned(), "ops/grafana/README.md".to_owned()];
    let mut docs: Vec<String> = fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs"))
        .expect("docs/")
        .flatten()
        .map(|entry| format!("docs/{}", entry.file_name().to_string_lossy()))
        .filter(|name| name.ends_with(".md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut total = 0;
    for file in &files {
        let blocks = sql_blocks(&read(file));
        if file == "docs/operations.md" {
            assert!(
                blocks.len() >= 7,
                "docs/operations.md has {} sql blocks; the reader lost some",
                blocks.len()
            );
        }
        for (n, sql) in blocks.iter().enumerate() {
            total += 1;
            for problem in check(sql, &schema, &datasets, &[]) {
                failures.push(format!("{file}, sql block {}: {problem}", n + 1));
            }
        }
    }
    assert!(total > 0);
    report(failures);
}

#[test]
fn the_dashboard_reads_what_the_worker_writes_from_every_bound_dataset() {
    let datasets = bound_datasets();
    let schema = Schema::current();
    let dashboard: serde_json::Value = serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON");
    let variables = dashboard["templating"]["list"].as_array().expect("templating.list");
    let variable = |name: &str| {
        variables.iter().find(|v| v["name"] == name).unwrap_or_else(|| panic!("no `{name}` variable"))
    };
    // The data source is picked among the plugin's, and the dataset among those the
    // environments bind: every one of them, and no other.
    assert_eq!(variable("datasource")["type"], "datasource");
    assert_eq!(variable("datasource")["query"], PLUGIN);
    let mut offered: Vec<String> = variable("dataset")["options"]
        .as_array()
        .expect("the dataset variable lists its options")
        .iter()
        .map(|option| option["value"].as_str().expect("an option's value").to_owned())
        .collect();
    offered.sort();
    let mut bound = datasets.clone();
    bound.sort();
    assert_eq!(offered, bound, "the dashboard's datasets are not the ones wrangler.toml binds");

    let mut failures = Vec::new();
    let mut ids = Vec::new();
    for panel in panels(&dashboard) {
        ids.push(panel["id"].as_u64().expect("every panel has an id"));
        if panel["type"] == "row" {
            continue;
        }
        let title = panel["title"].as_str().unwrap_or_default();
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "{title}: the panel's data source is the variable"
        );
        for target in panel["targets"].as_array().into_iter().flatten() {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{title}");
            assert_eq!(
                target["dateTimeColDataType"], "timestamp",
                "{title}: $timeSeries and $timeFilter need it"
            );
        }
    }
    let count = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), count, "panel ids are unique");

    let queries = dashboard_queries();
    assert!(queries.len() >= 10, "{} dashboard queries", queries.len());
    for (title, query) in &queries {
        if !query.contains("FROM $dataset") {
            failures.push(format!("{title}: reads FROM $dataset, so that the dataset picker applies"));
        }
        for dataset in &datasets {
            for problem in check(&query.replace("$dataset", dataset), &schema, &datasets, &GRAFANA_MACROS) {
                failures.push(format!("{title} ({dataset}): {problem}"));
            }
        }
    }
    report(failures);
}

#[test]
fn the_alert_rules_read_what_the_worker_writes() {
    let datasets = bound_datasets();
    let schema = Schema::current();
    let alerts = read(ALERTS);
    let queries = alert_queries();
    assert!(queries.len() >= 5, "{} alert queries", queries.len());
    // Each rule's data query goes to the provisioned data source.
    let datasource = read(DATASOURCE);
    assert!(datasource.contains(&format!("type: {PLUGIN}")), "{DATASOURCE}");
    assert!(datasource.contains("/analytics_engine/sql"), "{DATASOURCE} points at the SQL API");
    let uid = datasource
        .lines()
        .find_map(|line| line.trim().strip_prefix("uid:"))
        .map(str::trim)
        .expect("the data source has a fixed uid, which the alert rules name");
    let sent = alerts.lines().filter(|line| line.trim() == format!("datasourceUid: {uid}")).count();
    assert_eq!(sent, queries.len(), "every alert query names the data source {uid}");
    let mut failures = Vec::new();
    for (title, query) in &queries {
        for problem in check(query, &schema, &datasets, &GRAFANA_MACROS) {
            failures.push(format!("{ALERTS}, `{title}`: {problem}"));
        }
    }
    report(failures);
}

/// The reader refuses each kind of mistake it is there to catch (a positive control: a
/// reader that passed everything would pass the shipped queries too).
#[test]
fn the_query_check_refuses_what_the_worker_does_not_write() {
    let datasets = vec!["idempotency_edge".to_owned()];
    let schema = Schema::current();
    let window = "timestamp > NOW() - INTERVAL '1' HOUR";
    let good = format!(
        "SELECT blob2 AS problem, sum(_sample_interval) AS requests, \
         quantileExactWeighted(0.99)(double3, _sample_interval) AS p99_origin_ms \
         FROM idempotency_edge WHERE blob1 = 'rejected' AND blob2 IN ('key-reused', 'in-progress') \
         AND double2 != 0 AND double3 > -1 AND {window} GROUP BY problem ORDER BY requests DESC"
    );
    assert_eq!(check(&good, &schema, &datasets, &[]), Vec::<String>::new());
    let bad = [
        ("blob1 = 'rejected:key-reused'", "never holds 'rejected:key-reused'"),
        ("blob1 IN ('replayed', 'replay')", "never holds 'replay'"),
        ("blob2 = 'key_reused'", "never holds 'key_reused'"),
        ("blob4 = 'observed'", "never holds 'observed'"),
        ("blob11 = ''", "blob11 is never written"),
        ("double9 > 0", "double9 is never written"),
        ("double1 = '409'", "holds a number"),
        ("blob1 = 1", "holds text"),
        ("blob2 LIKE 'key%'", "LIKE"),
        ("origin_ms > 100", "`origin_ms` is not a column"),
    ];
    for (condition, expected) in bad {
        let sql =
            format!("SELECT sum(_sample_interval) AS n FROM idempotency_edge WHERE {condition} AND {window}");
        let problems = check(&sql, &schema, &datasets, &[]);
        assert!(problems.iter().any(|p| p.contains(expected)), "{condition}: {problems:?}");
    }
    let whole = [
        (format!("SELECT count() AS n FROM idempotency_edge WHERE {window}"), "count() counts a sampled row once"),
        (
            format!("SELECT quantileWeighted(0.5)(double3, _sample_interval) AS m FROM idempotency_edge WHERE {window}"),
            "quantileWeighted() is the legacy name",
        ),
        (format!("SELECT sum(_sample_interval) AS n FROM idempotency_edge_prod WHERE {window}"), "binds no such"),
        ("SELECT sum(_sample_interval) AS n FROM idempotency_edge".to_owned(), "does not bound `timestamp`"),
        (format!("SELECT sum(double1) AS n FROM idempotency_edge WHERE {window}"), "not weighted"),
        (
            format!("SELECT quantileExactWeighted(0.5)(double4, _sample_interval) AS p50_origin_ms FROM idempotency_edge WHERE {window}"),
            "names the field origin_ms",
        ),
        (format!("SELECT $timeSeries AS t FROM idempotency_edge WHERE {window}"), "`$timeSeries` is not a macro"),
        (format!("SELECT 'it''s' AS s FROM idempotency_edge WHERE {window} AND blob1 = 'x"), "not closed"),
    ];
    for (sql, expected) in whole {
        let problems = check(&sql, &schema, &datasets, &[]);
        assert!(problems.iter().any(|p| p.contains(expected)), "{sql}: {problems:?}");
    }
}

/// Had the writer put the problem in `blob1` and the decision in `blob2`, the shipped
/// queries would fail: the check follows the writer's table, not a copy of it.
#[test]
fn a_writer_that_moved_a_field_would_fail_the_shipped_queries() {
    let datasets = bound_datasets();
    let mut swapped = Schema::current();
    let position = |schema: &Schema, name: &str| schema.columns.iter().position(|c| c.name == name).unwrap();
    let (one, two) = (position(&swapped, "blob1"), position(&swapped, "blob2"));
    let (decision, problem) = (swapped.columns[one].field, swapped.columns[two].field);
    swapped.columns[one].field = problem;
    swapped.columns[two].field = decision;
    let failing = sql_blocks(&read("docs/operations.md"))
        .iter()
        .chain(dashboard_queries().iter().map(|(_, q)| q))
        .filter(|sql| {
            !check(&sql.replace("$dataset", &datasets[0]), &swapped, &datasets, &GRAFANA_MACROS).is_empty()
        })
        .count();
    assert!(failing >= 5, "only {failing} queries noticed that blob1 and blob2 changed places");
}
