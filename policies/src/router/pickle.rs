//! A small, safe reader for the pickles `torch.save` writes: plain data
//! (None, bools, ints, floats, strings, lists, tuples, dicts), ordered
//! dicts, torch dtypes, and tensors as references into the archive's
//! storages. Nothing is executed: `GLOBAL` is accepted only for the few
//! names below, `REDUCE` only calls our own stand-ins for them, and any
//! other opcode or global is refused with its name.

mod machine;

use machine::Machine;

/// A storage element type (the `torch.*Storage` class of a persistent id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageDtype {
    /// float32.
    F32,
    /// float64.
    F64,
    /// float16.
    F16,
    /// bfloat16.
    Bf16,
    /// int64.
    I64,
    /// int32.
    I32,
    /// int16.
    I16,
    /// int8.
    I8,
    /// uint8.
    U8,
    /// bool.
    Bool,
}

impl StorageDtype {
    fn from_storage_class(name: &str) -> Option<Self> {
        Some(match name {
            "FloatStorage" => Self::F32,
            "DoubleStorage" => Self::F64,
            "HalfStorage" => Self::F16,
            "BFloat16Storage" => Self::Bf16,
            "LongStorage" => Self::I64,
            "IntStorage" => Self::I32,
            "ShortStorage" => Self::I16,
            "CharStorage" => Self::I8,
            "ByteStorage" => Self::U8,
            "BoolStorage" => Self::Bool,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Self::F64 | Self::I64 => 8,
            Self::F32 | Self::I32 => 4,
            Self::F16 | Self::Bf16 | Self::I16 => 2,
            Self::I8 | Self::U8 | Self::Bool => 1,
        }
    }

    /// True for floating-point types.
    pub fn is_float(self) -> bool {
        matches!(self, Self::F32 | Self::F64 | Self::F16 | Self::Bf16)
    }
}

/// A tensor in the pickle: a view of a storage (by archive key).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorRef {
    /// Storage key: the file `data/<key>` in the archive.
    pub key: String,
    /// Element type.
    pub dtype: StorageDtype,
    /// Elements in the storage.
    pub storage_numel: usize,
    /// Offset into the storage, in elements.
    pub offset: usize,
    /// Shape.
    pub size: Vec<usize>,
    /// Strides, in elements.
    pub stride: Vec<usize>,
}

/// A decoded object.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `None`.
    None,
    /// A bool.
    Bool(bool),
    /// An int (pickled ints beyond 64 bits are refused).
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// A list or tuple.
    List(Vec<Value>),
    /// A dict or OrderedDict, in order.
    Dict(Vec<(Value, Value)>),
    /// A torch dtype such as `torch.float32` (its name).
    Dtype(String),
    /// A tensor.
    Tensor(TensorRef),
}

impl Value {
    /// The entry under string key `key` of a dict.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(items) => items
                .iter()
                .find(|(k, _)| matches!(k, Value::Str(s) if s == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// Converts plain data to JSON (tensors are refused; dtypes become
    /// strings such as `"torch.float32"`).
    pub fn to_json(&self) -> Result<serde_json::Value, String> {
        use serde_json::Value as J;
        Ok(match self {
            Value::None => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Int(i) => J::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map(J::Number)
                .unwrap_or(J::Null),
            Value::Str(s) => J::String(s.clone()),
            Value::Dtype(d) => J::String(format!("torch.{d}")),
            Value::List(items) => {
                J::Array(items.iter().map(Value::to_json).collect::<Result<_, _>>()?)
            }
            Value::Dict(items) => {
                let mut map = serde_json::Map::new();
                for (k, v) in items {
                    let Value::Str(k) = k else {
                        return Err(format!("a dict key is not a string: {k:?}"));
                    };
                    map.insert(k.clone(), v.to_json()?);
                }
                J::Object(map)
            }
            Value::Tensor(_) => return Err("a tensor where plain data was expected".into()),
        })
    }
}

/// Decodes one pickle (`data.pkl` of a torch.save archive).
pub fn read(data: &[u8]) -> Result<Value, String> {
    let mut m = Machine::new(data);
    let root = m.run()?;
    m.value(root, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_data_and_memo_references() {
        // Protocol 2: {'a': [1, 2.5, 'x'], 'b': (True, None), 'c': <memo 1>}
        let mut p = vec![
            0x80, 2, b'}', b'q', 0, b'(', b'X', 1, 0, 0, 0, b'a', b']', b'q', 1,
        ];
        p.extend([b'(', b'K', 1, b'G']);
        p.extend(2.5f64.to_be_bytes());
        p.extend([b'X', 1, 0, 0, 0, b'x', b'e']);
        p.extend([b'X', 1, 0, 0, 0, b'b', 0x88, b'N', 0x86]);
        p.extend([b'X', 1, 0, 0, 0, b'c', b'h', 1, b'u', b'.']);
        let v = read(&p).unwrap();
        let list = Value::List(vec![
            Value::Int(1),
            Value::Float(2.5),
            Value::Str("x".into()),
        ]);
        assert_eq!(v.get("a"), Some(&list));
        assert_eq!(
            v.get("b"),
            Some(&Value::List(vec![Value::Bool(true), Value::None]))
        );
        // The memo entry was taken before the list was filled; it sees the items.
        assert_eq!(v.get("c"), Some(&list));
        assert_eq!(
            v.to_json().unwrap(),
            serde_json::json!({"a": [1, 2.5, "x"], "b": [true, null], "c": [1, 2.5, "x"]})
        );
    }

    #[test]
    fn code_execution_is_refused() {
        let evil = b"\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00lsq\x01\x85q\x02Rq\x03.";
        let e = read(evil).unwrap_err();
        assert!(e.contains("refuses global `os.system`"), "{e}");
        let e = read(b"\x80\x02cbuiltins\neval\n.").unwrap_err();
        assert!(e.contains("builtins.eval"), "{e}");
        let e = read(b"\x80\x02I1\n.").unwrap_err();
        assert!(e.contains("opcode 0x49"), "{e}");
        assert!(read(b"\x80\x02}").unwrap_err().contains("truncated"));
        let e = read(b"\x80\x02ctorch\nload\n.").unwrap_err();
        assert!(e.contains("torch.load"), "{e}");
    }
}
