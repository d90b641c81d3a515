//! A configuration variable with an invalid value: what every parser of a variable, in
//! whichever layer the variable's meaning lives, answers with.

/// A variable with an invalid value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub variable: &'static str,
    pub reason: String,
}

impl ConfigError {
    pub(crate) fn new(variable: &'static str, reason: impl Into<String>) -> Self {
        ConfigError { variable, reason: reason.into() }
    }

    /// A sentence for the problem's `detail`.
    pub fn detail(&self) -> String {
        format!("{} is invalid: {}", self.variable, self.reason)
    }
}
