//! No binding any more: the runtime's error (what JavaScript threw, or a message made here,
//! with the fault it is in `core::vocabulary::fault`), and the first of two futures to finish.
//!
//! Everything the runtime calls on workerd is the `worker` crate's (entry points, `Env`,
//! bindings, context, Durable Object storage and alarms, `Delay`, the log's
//! `console_*!`), with `runtime::bindings` for what it lacks. The error stays because a
//! dozen modules answer and log through it and its `fault()`; moving them onto
//! `worker::Error` is a change across the Worker's and the object's modules at once. Owns no
//! decision.

use std::fmt;
use std::future::Future;
use std::task::Poll;

use js_sys::Reflect;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::core::vocabulary::fault::{Fault, PlatformCall, Stage};

/// A failure: what JavaScript threw (or a promise rejected with), or one made here.
pub enum Error {
    Js(JsValue),
    Rust(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The failure as a fault (`core::vocabulary::fault`): a platform call that threw while the object
    /// answered, after the key's step was carried out.
    pub fn fault(&self) -> Fault {
        Fault::platform(PlatformCall::Answer, Stage::AfterStep)
    }
}

impl From<JsValue> for Error {
    fn from(value: JsValue) -> Error {
        Error::Js(value)
    }
}

impl From<String> for Error {
    fn from(message: String) -> Error {
        Error::Rust(message)
    }
}

impl From<Error> for JsValue {
    fn from(error: Error) -> JsValue {
        match error {
            Error::Js(value) => value,
            Error::Rust(message) => js_sys::Error::new(&message).into(),
        }
    }
}

/// As the log has always shown them: a JavaScript error as `Name: message` (`Name [code]:
/// message` when it has a code), a thrown string as itself.
impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Rust(message) => f.write_str(message),
            Error::Js(value) => {
                if let Some(error) = value.dyn_ref::<js_sys::Error>() {
                    let name = error.name().as_string().unwrap_or_else(|| "Error".to_owned());
                    // Read with `as_string`: `String::from` throws on a message that is no string.
                    let message = error.message().as_string().unwrap_or_default();
                    match Reflect::get(value, &JsValue::from_str("code"))
                        .ok()
                        .and_then(|code| code.as_string())
                    {
                        Some(code) => write!(f, "{name} [{code}]: {message}"),
                        None => write!(f, "{name}: {message}"),
                    }
                } else if let Some(text) = value.as_string() {
                    f.write_str(&text)
                } else {
                    write!(f, "unrecognized JavaScript value: {value:?}")
                }
            }
        }
    }
}

/// What JavaScript threw, as its message alone: a thrown string itself, or an error's
/// `message`; `None` for anything else.
pub fn message_of(thrown: &JsValue) -> Option<String> {
    thrown.as_string().or_else(|| Reflect::get(thrown, &JsValue::from_str("message")).ok()?.as_string())
}

impl From<worker::Error> for Error {
    fn from(error: worker::Error) -> Error {
        Error::Rust(error.to_string())
    }
}

/// Which of two futures finished first ([`race`]).
pub enum Either<A, B> {
    Left(A),
    Right(B),
}

/// Whichever of `left` and `right` finishes first (`left` when both are ready at once); the
/// other is dropped unfinished.
pub async fn race<A: Future, B: Future>(left: A, right: B) -> Either<A::Output, B::Output> {
    let mut left = std::pin::pin!(left);
    let mut right = std::pin::pin!(right);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(value) = left.as_mut().poll(cx) {
            return Poll::Ready(Either::Left(value));
        }
        if let Poll::Ready(value) = right.as_mut().poll(cx) {
            return Poll::Ready(Either::Right(value));
        }
        Poll::Pending
    })
    .await
}
