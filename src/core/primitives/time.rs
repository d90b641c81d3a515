//! Time as the core reads it: milliseconds since the Unix epoch, which the runtime passes
//! in (the core reads no clock).

/// Milliseconds since the Unix epoch, as the runtime's clock reports them.
pub type Millis = u64;
