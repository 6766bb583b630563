//! How the plugin prints: aligned tables for people, JSON or YAML for scripts.

use serde::Serialize;

/// `-o` of every command.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A summary and aligned columns, as kubectl prints.
    #[default]
    Table,
    /// The report as JSON.
    Json,
    /// The report as YAML.
    Yaml,
}

/// `report` as `format`; `table` renders the human form.
pub fn print<T: Serialize>(format: Format, report: &T, table: impl FnOnce(&T) -> String) -> String {
    match format {
        Format::Table => table(report),
        Format::Json => {
            let mut text = serde_json::to_string_pretty(report).expect("reports always serialize");
            text.push('\n');
            text
        }
        Format::Yaml => serde_yaml::to_string(report).expect("reports always serialize"),
    }
}

/// Columns separated by three spaces and padded to their widest cell, as `kubectl get` prints.
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with the given header.
    pub fn new(header: &[&str]) -> Self {
        Self {
            rows: vec![header.iter().map(|h| (*h).to_owned()).collect()],
        }
    }

    /// Adds a row (as many cells as the header).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The aligned text, one line per row, without trailing spaces.
    pub fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|row| row.get(c))
                    .map(|cell| cell.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                line.push_str(cell);
                if c + 1 < row.len() {
                    let pad = widths[c] - cell.chars().count() + 3;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_padded_to_their_widest_cell() {
        let mut table = Table::new(&["WORKER", "JOBS"]);
        table.row(vec!["w-0".into(), "9".into()]);
        table.row(vec!["a-long-name".into(), "10".into()]);
        assert_eq!(
            table.render(),
            "WORKER        JOBS\nw-0           9\na-long-name   10\n"
        );
    }
}
