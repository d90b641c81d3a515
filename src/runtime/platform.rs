//! What is left of the runtime's hand-written bindings to workerd: a Durable Object's state,
//! storage, SQL and synchronous KV (`transactionSync` and `storage.kv` have no `worker`
//! binding: workers-rs#978), a timer race for the object's waiters, the log, and a
//! JavaScript error as a Rust value.
//!
//! The entry points, the panic hook and the init state that `src/entry.mjs` recovers from a
//! trap with, `Env`, the bindings and the request's context are the `worker` crate's
//! (`#[event(fetch)]`, `#[durable_object]`, `worker::init`). Owns no decision.

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use js_sys::{Array, Promise, Reflect, Uint8Array};
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

/// What JavaScript threw, as the log shows it ([`Error`]'s `Display`).
pub fn describe(thrown: JsValue) -> String {
    Error::Js(thrown).to_string()
}

/// What JavaScript threw, as its message alone: a thrown string itself, or an error's
/// `message`; `None` for anything else.
pub fn message_of(thrown: &JsValue) -> Option<String> {
    thrown.as_string().or_else(|| Reflect::get(thrown, &JsValue::from_str("message")).ok()?.as_string())
}

/// One line to the log at its level.
pub fn log_line(level: Level, line: &str) {
    let line = JsValue::from_str(line);
    match level {
        Level::Log => web_sys::console::log_1(&line),
        Level::Warn => web_sys::console::warn_1(&line),
        Level::Error => web_sys::console::error_1(&line),
    }
}

/// A log line's level: the `console` method it goes to.
pub enum Level {
    Log,
    Warn,
    Error,
}

/// `console.log` of a formatted line.
macro_rules! console_log {
    ($($arg:tt)*) => {
        $crate::runtime::platform::log_line($crate::runtime::platform::Level::Log, &format!($($arg)*))
    };
}

/// `console.warn` of a formatted line.
macro_rules! console_warn {
    ($($arg:tt)*) => {
        $crate::runtime::platform::log_line($crate::runtime::platform::Level::Warn, &format!($($arg)*))
    };
}

/// `console.error` of a formatted line.
macro_rules! console_error {
    ($($arg:tt)*) => {
        $crate::runtime::platform::log_line($crate::runtime::platform::Level::Error, &format!($($arg)*))
    };
}

pub(crate) use {console_error, console_log, console_warn};

/// The Worker's (and the object's) environment: `worker`'s.
pub use worker::Env;

impl From<worker::Error> for Error {
    fn from(error: worker::Error) -> Error {
        Error::Rust(error.to_string())
    }
}

#[wasm_bindgen]
extern "C" {
    /// A Durable Object's state.
    #[wasm_bindgen(extends = js_sys::Object)]
    pub type DurableObjectState;

    #[wasm_bindgen(method, getter)]
    pub fn storage(this: &DurableObjectState) -> DurableObjectStorage;

    #[wasm_bindgen(method, getter)]
    pub fn id(this: &DurableObjectState) -> DurableObjectId;

    #[wasm_bindgen(extends = js_sys::Object)]
    pub type DurableObjectId;

    /// The id as 64 hex digits.
    #[wasm_bindgen(method, js_name = toString)]
    pub fn to_hex(this: &DurableObjectId) -> String;

    /// A Durable Object's storage.
    #[wasm_bindgen(extends = js_sys::Object)]
    #[derive(Clone)]
    pub type DurableObjectStorage;

    #[wasm_bindgen(method, getter)]
    pub fn sql(this: &DurableObjectStorage) -> SqlStorage;

    /// The synchronous key-value API of a SQLite-backed object (`ctx.storage.kv`).
    #[wasm_bindgen(method, getter)]
    pub fn kv(this: &DurableObjectStorage) -> SyncKvStorage;

    #[wasm_bindgen(method, catch, js_name = deleteAll)]
    pub fn delete_all(this: &DurableObjectStorage) -> std::result::Result<Promise, JsValue>;

    /// Runs `callback` in a transaction: committed when it returns, rolled back (and the
    /// exception rethrown) when it throws.
    #[wasm_bindgen(method, catch, js_name = transactionSync)]
    pub fn transaction_sync(
        this: &DurableObjectStorage,
        callback: &mut dyn FnMut() -> std::result::Result<JsValue, JsValue>,
    ) -> std::result::Result<JsValue, JsValue>;

    #[wasm_bindgen(method, catch, js_name = deleteAlarm)]
    pub fn delete_alarm(this: &DurableObjectStorage) -> std::result::Result<Promise, JsValue>;

    /// `setAlarm(ms)`, the time as milliseconds since the epoch, which the runtime takes as
    /// it takes a `Date`: building a `Date` per claim cost a crossing, and an isolate's
    /// first `new Date` was one of its first request's dearest calls in the profile
    /// (`node bench/bench.mjs profile cold`).
    #[wasm_bindgen(method, catch, js_name = setAlarm)]
    pub fn set_alarm(this: &DurableObjectStorage, at_ms: f64) -> std::result::Result<Promise, JsValue>;

    /// A SQLite-backed object's synchronous key-value API: its values live in the object's
    /// own database (a table workerd creates for itself, `_cf_KV`), written in the caller's
    /// turn like SQL, so the output gate holds an outgoing fetch until they are durable.
    #[wasm_bindgen(extends = js_sys::Object)]
    #[derive(Clone)]
    pub type SyncKvStorage;

    /// The value stored under `key` (structured-cloned), or `undefined`.
    #[wasm_bindgen(method, catch, js_name = get)]
    pub fn get(this: &SyncKvStorage, key: &str) -> std::result::Result<JsValue, JsValue>;

    #[wasm_bindgen(method, catch, js_name = put)]
    pub fn put(this: &SyncKvStorage, key: &str, value: &Uint8Array) -> std::result::Result<(), JsValue>;

    /// Whether a value was deleted.
    #[wasm_bindgen(method, catch, js_name = delete)]
    pub fn delete(this: &SyncKvStorage, key: &str) -> std::result::Result<bool, JsValue>;

    /// A Durable Object's SQLite database.
    #[wasm_bindgen(extends = js_sys::Object)]
    #[derive(Clone)]
    pub type SqlStorage;

    #[wasm_bindgen(method, catch, variadic, js_name = exec)]
    fn exec_with(this: &SqlStorage, query: &str, bindings: &Array)
        -> std::result::Result<SqlCursor, JsValue>;

    /// A statement's result.
    #[wasm_bindgen(extends = js_sys::Object)]
    pub type SqlCursor;

    /// The rows as arrays of column values.
    #[wasm_bindgen(method)]
    fn raw(this: &SqlCursor) -> js_sys::Iterator;

    /// The rows as objects, column names as keys.
    #[wasm_bindgen(method, catch, js_name = toArray)]
    fn to_array(this: &SqlCursor) -> std::result::Result<Array, JsValue>;

    #[wasm_bindgen(js_name = setTimeout)]
    fn set_timeout(handler: &js_sys::Function, ms: f64) -> JsValue;

    #[wasm_bindgen(js_name = clearTimeout)]
    fn clear_timeout(id: &JsValue);
}

impl SqlStorage {
    /// Runs `query` with `bindings` (synchronous: in the caller's turn).
    pub fn run(&self, query: &str, bindings: &[JsValue]) -> Result<SqlCursor> {
        let array = Array::new();
        for value in bindings {
            array.push(value);
        }
        Ok(self.exec_with(query, &array)?)
    }
}

impl SqlCursor {
    /// The first row's column values, if there is a row.
    pub fn first_row(&self) -> Result<Option<Array>> {
        let next = self.raw().next()?;
        Ok(if next.done() { None } else { Some(next.value().unchecked_into()) })
    }

    /// Every row, as an object per row.
    pub fn rows(&self) -> Result<Array> {
        Ok(self.to_array()?)
    }
}

/// A SQL value as bytes, when it is a blob (the runtime returns an `ArrayBuffer`).
pub fn sql_bytes(value: &JsValue) -> Option<Vec<u8>> {
    if let Some(buffer) = value.dyn_ref::<js_sys::ArrayBuffer>() {
        return Some(Uint8Array::new(buffer).to_vec());
    }
    value.dyn_ref::<Uint8Array>().map(Uint8Array::to_vec)
}

/// A timer: ready once its time has passed. Dropped before then, it clears its timeout, so
/// a wait that something else ended leaves no timer behind.
pub struct Delay {
    ms: f64,
    fired: Rc<Cell<bool>>,
    timeout: Option<(JsValue, Closure<dyn FnMut()>)>,
}

impl From<Duration> for Delay {
    fn from(wait: Duration) -> Delay {
        Delay { ms: wait.as_millis() as f64, fired: Rc::new(Cell::new(false)), timeout: None }
    }
}

impl Future for Delay {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        if self.fired.get() {
            return Poll::Ready(());
        }
        if self.timeout.is_none() {
            let fired = self.fired.clone();
            let waker = cx.waker().clone();
            let callback = Closure::<dyn FnMut()>::new(move || {
                fired.set(true);
                waker.wake_by_ref();
            });
            let id = set_timeout(callback.as_ref().unchecked_ref(), self.ms);
            self.timeout = Some((id, callback));
        }
        Poll::Pending
    }
}

impl Drop for Delay {
    fn drop(&mut self) {
        if let Some((id, _)) = &self.timeout {
            if !self.fired.get() {
                clear_timeout(id);
            }
        }
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
