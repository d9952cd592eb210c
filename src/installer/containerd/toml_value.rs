//! Comparing TOML documents by meaning: values and structure, not formatting, comments, key
//! quoting or table-header layout.

use toml_edit::{Item, Table, Value};

/// Whether two tables hold the same keys with the same values.
pub fn same_table(a: &Table, b: &Table) -> bool {
    let keys = |t: &Table| t.iter().filter(|(_, item)| !item.is_none()).count();
    keys(a) == keys(b)
        && a.iter()
            .filter(|(_, item)| !item.is_none())
            .all(|(key, item)| b.get(key).is_some_and(|other| same_item(item, other)))
}

fn same_item(a: &Item, b: &Item) -> bool {
    // A table may be written as a header table or inline; both mean the same.
    match (a, b) {
        (Item::Table(x), Item::Table(y)) => same_table(x, y),
        (Item::ArrayOfTables(x), Item::ArrayOfTables(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(x, y)| same_table(x, y))
        }
        (Item::Value(Value::InlineTable(x)), Item::Table(y))
        | (Item::Table(y), Item::Value(Value::InlineTable(x))) => {
            same_table(&x.clone().into_table(), y)
        }
        (Item::Value(x), Item::Value(y)) => same_value(x, y),
        _ => false,
    }
}

fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::String(x), Value::String(y)) => x.value() == y.value(),
        (Value::Integer(x), Value::Integer(y)) => x.value() == y.value(),
        (Value::Float(x), Value::Float(y)) => {
            let (x, y) = (*x.value(), *y.value());
            x == y || (x.is_nan() && y.is_nan())
        }
        (Value::Boolean(x), Value::Boolean(y)) => x.value() == y.value(),
        (Value::Datetime(x), Value::Datetime(y)) => x.value() == y.value(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(x, y)| same_value(x, y))
        }
        (Value::InlineTable(x), Value::InlineTable(y)) => {
            same_table(&x.clone().into_table(), &y.clone().into_table())
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(a: &str, b: &str) -> bool {
        let a: toml_edit::DocumentMut = a.parse().unwrap();
        let b: toml_edit::DocumentMut = b.parse().unwrap();
        same_table(a.as_table(), b.as_table())
    }

    #[test]
    fn formatting_and_spelling_do_not_matter() {
        assert!(same(
            "version = 2\n[plugins.'a.b']\n  x = 1 # one\n[plugins.\"a.b\".c]\n  y = \"z\"\n",
            "version = 2\n\n[plugins.\"a.b\"]\nx = 1\n\n[plugins.\"a.b\".c]\ny = 'z'\n"
        ));
        assert!(same("[a]\nb = {c = 1}\n", "[a.b]\nc = 1\n"));
    }

    #[test]
    fn values_and_keys_do() {
        assert!(!same("x = 1\n", "x = 2\n"));
        assert!(!same("x = 1\n", "x = 1\ny = 2\n"));
        assert!(!same("x = \"1\"\n", "x = 1\n"));
        assert!(!same("[[a]]\nb = 1\n", "[[a]]\nb = 1\n[[a]]\nb = 2\n"));
        assert!(!same("a = [1, 2]\n", "a = [2, 1]\n"));
    }
}
