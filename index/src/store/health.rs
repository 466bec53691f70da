//! What `cairn doctor` asks of a source's tables: does each open at its latest version and read
//! whole (every data file its manifest names), and, when one does not, which older version
//! (Lance keeps them until the upkeep prunes) still does, to restore it as a new version.
//!
//! Nothing here removes a file: a manifest too damaged to open is set aside by the caller, which
//! reaches the store's objects (`cairn-actors`' doctor).

use super::Database;
use crate::error::Result;
use futures::TryStreamExt;
use lancedb::Table;
use lancedb::query::ExecutableQuery;

/// The three tables of a source, by suffix.
pub const TABLE_SUFFIXES: [&str; 3] = ["pages", "chunks", "manifest"];

/// What reading one table found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TableHealth {
    /// The table's name (`<id>_<suffix>`).
    pub table: String,
    /// Its latest version, when it opens.
    pub version: Option<u64>,
    /// The rows of that version, when they all read.
    pub rows: Option<usize>,
    /// What failed: the open, or a read of its rows.
    pub problem: Option<TableProblem>,
}

/// Why a table is damaged.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "message", rename_all = "snake_case")]
pub enum TableProblem {
    /// It does not open at its latest version (a torn or missing manifest).
    Unopenable(String),
    /// It opens, but its rows do not all read (a data file missing or torn).
    Unreadable(String),
}

impl TableHealth {
    pub fn is_whole(&self) -> bool {
        self.problem.is_none()
    }
}

/// Every row of `table`'s checked-out version, read (all columns): the count, or why not.
async fn read_whole(table: &Table) -> std::result::Result<usize, String> {
    let read = async {
        let stream = table.query().execute().await.map_err(|e| e.to_string())?;
        stream.try_fold(0usize, |n, b| async move { Ok(n + b.num_rows()) }).await.map_err(|e| e.to_string())
    };
    crate::fault::contained_async(read)
        .await
        .unwrap_or_else(|panic| Err(format!("reading it panicked: {panic}")))
}

impl Database {
    /// Open `name` at its latest version and read every row of it.
    pub async fn examine_table(&self, name: &str) -> TableHealth {
        let mut health = TableHealth { table: name.into(), version: None, rows: None, problem: None };
        let opened = crate::fault::contained_async(self.conn.open_table(name).execute()).await;
        let table = match opened {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => {
                health.problem = Some(TableProblem::Unopenable(e.to_string()));
                return health;
            }
            Err(panic) => {
                health.problem =
                    Some(TableProblem::Unopenable(format!("reading its manifest panicked: {panic}")));
                return health;
            }
        };
        health.version = table.version().await.ok();
        match read_whole(&table).await {
            Ok(rows) => health.rows = Some(rows),
            Err(e) => health.problem = Some(TableProblem::Unreadable(e)),
        }
        health
    }

    /// The newest version of `name`, older than its latest, whose rows all read: restored as
    /// the table's new latest version (nothing is deleted: the damaged versions stay in its
    /// history until the upkeep prunes them). `Ok(None)` when no version reads whole.
    pub async fn restore_readable(&self, name: &str) -> Result<Option<u64>> {
        let err = |e: lancedb::Error| self.err("*", format!("{name}: {e}"));
        let table = self.conn.open_table(name).execute().await.map_err(err)?;
        let latest = table.version().await.map_err(err)?;
        let mut versions: Vec<u64> =
            table.list_versions().await.map_err(err)?.into_iter().map(|v| v.version).collect();
        versions.sort_unstable_by(|a, b| b.cmp(a));
        for v in versions.into_iter().filter(|v| *v < latest) {
            let checked_out = crate::fault::contained_async(table.checkout(v)).await;
            if !matches!(checked_out, Ok(Ok(()))) || read_whole(&table).await.is_err() {
                continue;
            }
            table.restore().await.map_err(err)?;
            return Ok(Some(v));
        }
        Ok(None)
    }
}
