//! The schema against the writer: each field lands in the column the schema names.

use super::*;
use crate::core::jwt::Unverified;
use crate::core::log::{Decision, LineContext, RequestLog, Trace};
use crate::core::scope::ScopeLog;

#[test]
fn every_field_lands_in_the_column_the_schema_names() {
    let line = RequestLog {
        object: Some("0123456789abcdef".into()),
        decision: Decision::Rejected(ProblemKind::KeyReused),
        status: 201,
        origin_status: Some(202),
        origin_ms: Some(203),
        wait_ms: Some(204),
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
    let bare = RequestLog {
        object: None,
        decision: Decision::Executed,
        status: 201,
        origin_status: None,
        origin_ms: None,
        wait_ms: None,
        scope: None,
    }
    .data_point();
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
