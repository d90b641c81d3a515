//! The grammars of the names a configuration gives and a policy carries: a header name
//! (an RFC 9110 token) and a Worker binding's name.

/// Longest binding name accepted.
const MAX_BINDING_NAME: usize = 64;

/// Whether `name` can name a Worker binding: a JavaScript identifier in ASCII letters,
/// digits and `_`, not starting with a digit (it also travels in the object's policy header,
/// so it may hold no `,`).
pub fn is_binding_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    let first_ok = bytes.next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    first_ok && name.len() <= MAX_BINDING_NAME && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Whether `name` is a header name: an RFC 9110 token.
pub fn is_header_name(name: &str) -> bool {
    let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    !name.is_empty() && name.bytes().all(tchar)
}
