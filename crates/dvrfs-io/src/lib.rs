//! Device access for the runtime shell.
