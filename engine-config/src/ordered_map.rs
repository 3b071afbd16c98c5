//! A YAML map read in file order. `model:` order is the model index, so a
//! hash map (or a sorted one) would lose meaning.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

/// `name -> V` pairs in the order the file lists them; names are unique.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OrderedMap<V>(pub Vec<(String, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for OrderedMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(OrderedMapVisitor(PhantomData))
    }
}

struct OrderedMapVisitor<V>(PhantomData<V>);

impl<'de, V: Deserialize<'de>> Visitor<'de> for OrderedMapVisitor<V> {
    type Value = OrderedMap<V>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map keyed by name")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut entries: Vec<(String, V)> = Vec::with_capacity(map.size_hint().unwrap_or(0));
        while let Some(name) = map.next_key::<String>()? {
            // The YAML parser already rejects repeated keys; this guards other
            // deserializers.
            if entries.iter().any(|(seen, _)| *seen == name) {
                return Err(serde::de::Error::custom(format!("`{name}` appears twice")));
            }
            let value = map.next_value()?;
            entries.push((name, value));
        }
        Ok(OrderedMap(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_file_order() {
        let m: OrderedMap<u32> = serde_yaml::from_str("z: 1\na: 2\nm: 3\n").unwrap();
        let names: Vec<&str> = m.0.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["z", "a", "m"]);
        assert_eq!(m.0[1].1, 2);
        let empty: OrderedMap<u32> = serde_yaml::from_str("{}").unwrap();
        assert!(empty.0.is_empty());
        let err = serde_yaml::from_str::<OrderedMap<u32>>("[1]").unwrap_err();
        assert!(err.to_string().contains("a map keyed by name"), "{err}");
    }

    #[test]
    fn rejects_repeated_names() {
        let json = serde_json::from_str::<OrderedMap<u32>>(r#"{"a": 1, "a": 2}"#).unwrap_err();
        assert!(json.to_string().contains("`a` appears twice"), "{json}");
    }
}
