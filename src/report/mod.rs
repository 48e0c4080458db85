//! Exporters: text tables for the terminal, and (later) Markdown and HTML.
pub mod table;
