//! A small, safe reader for the pickles `torch.save` writes: plain data
//! (None, bools, ints, floats, strings, lists, tuples, dicts), ordered
//! dicts, torch dtypes, and tensors as references into the archive's
//! storages. Nothing is executed: `GLOBAL` is accepted only for the few
//! names below, `REDUCE` only calls our own stand-ins for them, and any
//! other opcode or global is refused with its name.

use std::collections::HashMap;

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

/// What the pickle may name with `GLOBAL`.
#[derive(Debug, Clone, PartialEq)]
enum Global {
    OrderedDict,
    RebuildTensorV2,
    RebuildParameter,
    Storage(StorageDtype),
    Dtype(String),
}

const DTYPES: &[&str] = &[
    "float32", "float", "float64", "double", "float16", "half", "bfloat16", "int64", "long",
    "int32", "int", "int16", "short", "int8", "uint8", "bool",
];

fn global(module: &str, name: &str) -> Result<Global, String> {
    Ok(match (module, name) {
        ("collections", "OrderedDict") => Global::OrderedDict,
        ("torch._utils", "_rebuild_tensor_v2") => Global::RebuildTensorV2,
        ("torch._utils", "_rebuild_parameter") => Global::RebuildParameter,
        ("torch", n) if DTYPES.contains(&n) => Global::Dtype(n.to_string()),
        ("torch", n) => Global::Storage(StorageDtype::from_storage_class(n).ok_or_else(|| {
            format!("refuses global `torch.{n}` (not a storage type or dtype)")
        })?),
        _ => return Err(format!("refuses global `{module}.{name}`: torch.save writes no such object into a router checkpoint, and nothing is executed")),
    })
}

/// An object under construction (containers are shared through the memo).
#[derive(Debug, Clone)]
enum Node {
    Value(Value),
    List(Vec<usize>),
    Tuple(Vec<usize>),
    Dict(Vec<(usize, usize)>),
    Global(Global),
    Storage {
        key: String,
        dtype: StorageDtype,
        numel: usize,
    },
}

enum Item {
    Mark,
    Node(usize),
}

/// Largest nesting the reader follows when it builds the result.
const MAX_DEPTH: usize = 64;

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    nodes: Vec<Node>,
    stack: Vec<Item>,
    memo: HashMap<u32, usize>,
}

/// Decodes one pickle (`data.pkl` of a torch.save archive).
pub fn read(data: &[u8]) -> Result<Value, String> {
    let mut m = Machine {
        data,
        pos: 0,
        nodes: Vec::new(),
        stack: Vec::new(),
        memo: HashMap::new(),
    };
    let root = m.run()?;
    m.value(root, 0)
}

impl Machine<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        let end = end.ok_or_else(|| format!("truncated pickle at byte {}", self.pos))?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn line(&mut self) -> Result<String, String> {
        let rest = &self.data[self.pos..];
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or("unterminated GLOBAL name")?;
        let s = String::from_utf8(rest[..end].to_vec()).map_err(|e| e.to_string())?;
        self.pos += end + 1;
        Ok(s)
    }

    fn push(&mut self, node: Node) {
        self.nodes.push(node);
        self.stack.push(Item::Node(self.nodes.len() - 1));
    }

    fn pop(&mut self) -> Result<usize, String> {
        match self.stack.pop() {
            Some(Item::Node(i)) => Ok(i),
            _ => Err("stack underflow (or a MARK where an object was expected)".into()),
        }
    }

    fn top(&self) -> Result<usize, String> {
        match self.stack.last() {
            Some(Item::Node(i)) => Ok(*i),
            _ => Err("empty stack".into()),
        }
    }

    /// Pops everything down to the last MARK.
    fn pop_mark(&mut self) -> Result<Vec<usize>, String> {
        let mut items = Vec::new();
        loop {
            match self.stack.pop() {
                Some(Item::Mark) => break,
                Some(Item::Node(i)) => items.push(i),
                None => return Err("no MARK on the stack".into()),
            }
        }
        items.reverse();
        Ok(items)
    }

    fn string(&mut self, n: usize) -> Result<(), String> {
        let s = String::from_utf8(self.take(n)?.to_vec()).map_err(|e| e.to_string())?;
        self.push(Node::Value(Value::Str(s)));
        Ok(())
    }

    fn memo_put(&mut self, index: u32) -> Result<(), String> {
        let top = self.top()?;
        self.memo.insert(index, top);
        Ok(())
    }

    fn memo_get(&mut self, index: u32) -> Result<(), String> {
        let node = *self
            .memo
            .get(&index)
            .ok_or_else(|| format!("memo {index} was never stored"))?;
        self.stack.push(Item::Node(node));
        Ok(())
    }

    fn run(&mut self) -> Result<usize, String> {
        loop {
            let at = self.pos;
            let op = self.u8()?;
            match op {
                0x80 => {
                    let proto = self.u8()?;
                    if proto > 5 {
                        return Err(format!("pickle protocol {proto} is unknown"));
                    }
                }
                0x95 => {
                    self.take(8)?; // FRAME: a length hint only
                }
                b'.' => return self.pop(),
                b'(' => self.stack.push(Item::Mark),
                b'N' => self.push(Node::Value(Value::None)),
                0x88 => self.push(Node::Value(Value::Bool(true))),
                0x89 => self.push(Node::Value(Value::Bool(false))),
                b'K' => {
                    let v = self.u8()?;
                    self.push(Node::Value(Value::Int(v.into())))
                }
                b'M' => {
                    let b = self.take(2)?;
                    let v = u16::from_le_bytes([b[0], b[1]]);
                    self.push(Node::Value(Value::Int(v.into())))
                }
                b'J' => {
                    let v = self.u32()? as i32;
                    self.push(Node::Value(Value::Int(v.into())))
                }
                0x8a => {
                    let n = self.u8()? as usize;
                    let b = self.take(n)?;
                    if n > 8 {
                        return Err(format!("an integer of {n} bytes"));
                    }
                    let mut buf = [if b.last().is_some_and(|x| x & 0x80 != 0) {
                        0xff
                    } else {
                        0
                    }; 8];
                    buf[..n].copy_from_slice(b);
                    self.push(Node::Value(Value::Int(i64::from_le_bytes(buf))))
                }
                b'G' => {
                    let b = self.take(8)?;
                    let mut buf = [0u8; 8];
                    buf.copy_from_slice(b);
                    self.push(Node::Value(Value::Float(f64::from_be_bytes(buf))))
                }
                b'X' => {
                    let n = self.u32()? as usize;
                    self.string(n)?
                }
                0x8c => {
                    let n = self.u8()? as usize;
                    self.string(n)?
                }
                b'}' => self.push(Node::Dict(Vec::new())),
                b']' => self.push(Node::List(Vec::new())),
                b')' => self.push(Node::Tuple(Vec::new())),
                b't' => {
                    let items = self.pop_mark()?;
                    self.push(Node::Tuple(items))
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let mut items = (0..n).map(|_| self.pop()).collect::<Result<Vec<_>, _>>()?;
                    items.reverse();
                    self.push(Node::Tuple(items))
                }
                b'q' => {
                    let i = self.u8()?;
                    self.memo_put(i.into())?
                }
                b'r' => {
                    let i = self.u32()?;
                    self.memo_put(i)?
                }
                0x94 => {
                    let i = self.memo.len() as u32;
                    self.memo_put(i)?
                }
                b'h' => {
                    let i = self.u8()?;
                    self.memo_get(i.into())?
                }
                b'j' => {
                    let i = self.u32()?;
                    self.memo_get(i)?
                }
                b'a' => {
                    let v = self.pop()?;
                    let list = self.top()?;
                    self.extend(list, vec![v])?
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    let list = self.top()?;
                    self.extend(list, items)?
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    let dict = self.top()?;
                    self.set_items(dict, vec![k, v])?
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    let dict = self.top()?;
                    self.set_items(dict, items)?
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.push(Node::Global(global(&module, &name)?))
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    let (Node::Value(Value::Str(m)), Node::Value(Value::Str(n))) =
                        (&self.nodes[module], &self.nodes[name])
                    else {
                        return Err("STACK_GLOBAL without two strings".into());
                    };
                    let g = global(m, n)?;
                    self.push(Node::Global(g))
                }
                b'Q' => {
                    let pid = self.pop()?;
                    let node = self.storage(pid)?;
                    self.push(node)
                }
                b'R' => {
                    let args = self.pop()?;
                    let func = self.pop()?;
                    let node = self.reduce(func, args)?;
                    self.push(node)
                }
                b'b' => {
                    // BUILD sets attributes (an OrderedDict's `_metadata`);
                    // routers need none of them.
                    self.pop()?;
                    self.top()?;
                }
                _ => {
                    return Err(format!(
                        "refuses opcode 0x{op:02x} at byte {at} (not something torch.save writes)"
                    ))
                }
            }
        }
    }

    fn extend(&mut self, list: usize, items: Vec<usize>) -> Result<(), String> {
        match &mut self.nodes[list] {
            Node::List(l) => {
                l.extend(items);
                Ok(())
            }
            _ => Err("APPEND to something that is not a list".into()),
        }
    }

    fn set_items(&mut self, dict: usize, items: Vec<usize>) -> Result<(), String> {
        if !items.len().is_multiple_of(2) {
            return Err("SETITEMS with an odd number of items".into());
        }
        match &mut self.nodes[dict] {
            Node::Dict(d) => {
                d.extend(items.chunks(2).map(|kv| (kv[0], kv[1])));
                Ok(())
            }
            _ => Err("SETITEM on something that is not a dict".into()),
        }
    }

    fn tuple(&self, node: usize) -> Result<&[usize], String> {
        match &self.nodes[node] {
            Node::Tuple(items) => Ok(items),
            _ => Err("expected a tuple".into()),
        }
    }

    fn int(&self, node: usize) -> Result<usize, String> {
        match &self.nodes[node] {
            Node::Value(Value::Int(i)) if *i >= 0 => Ok(*i as usize),
            other => Err(format!("expected a non-negative int, got {other:?}")),
        }
    }

    /// `('storage', torch.XStorage, key, location, numel)`.
    fn storage(&self, pid: usize) -> Result<Node, String> {
        let t = self.tuple(pid)?;
        let [tag, class, key, _location, numel] = t else {
            return Err(format!("a persistent id of {} items", t.len()));
        };
        match (&self.nodes[*tag], &self.nodes[*class], &self.nodes[*key]) {
            (
                Node::Value(Value::Str(tag)),
                Node::Global(Global::Storage(dtype)),
                Node::Value(Value::Str(key)),
            ) if tag == "storage" => Ok(Node::Storage {
                key: key.clone(),
                dtype: *dtype,
                numel: self.int(*numel)?,
            }),
            _ => Err("a persistent id that is not ('storage', torch.XStorage, key, ...)".into()),
        }
    }

    fn ints(&self, node: usize) -> Result<Vec<usize>, String> {
        self.tuple(node)?.iter().map(|&i| self.int(i)).collect()
    }

    fn reduce(&self, func: usize, args: usize) -> Result<Node, String> {
        let args = self.tuple(args)?.to_vec();
        match &self.nodes[func] {
            Node::Global(Global::OrderedDict) if args.is_empty() => Ok(Node::Dict(Vec::new())),
            Node::Global(Global::RebuildTensorV2) if args.len() >= 4 => {
                let Node::Storage { key, dtype, numel } = &self.nodes[args[0]] else {
                    return Err("_rebuild_tensor_v2 without a storage".into());
                };
                let t = TensorRef {
                    key: key.clone(),
                    dtype: *dtype,
                    storage_numel: *numel,
                    offset: self.int(args[1])?,
                    size: self.ints(args[2])?,
                    stride: self.ints(args[3])?,
                };
                if t.size.len() != t.stride.len() {
                    return Err("a tensor whose size and stride differ in length".into());
                }
                Ok(Node::Value(Value::Tensor(t)))
            }
            Node::Global(Global::RebuildParameter) if !args.is_empty() => {
                Ok(self.nodes[args[0]].clone())
            }
            other => Err(format!("refuses to call {other:?}")),
        }
    }

    fn value(&self, node: usize, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err("nesting deeper than a checkpoint has (a cycle?)".into());
        }
        let all = |items: &[usize]| {
            items
                .iter()
                .map(|&i| self.value(i, depth + 1))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(match &self.nodes[node] {
            Node::Value(v) => v.clone(),
            Node::List(items) | Node::Tuple(items) => Value::List(all(items)?),
            Node::Dict(items) => Value::Dict(
                items
                    .iter()
                    .map(|&(k, v)| Ok((self.value(k, depth + 1)?, self.value(v, depth + 1)?)))
                    .collect::<Result<_, String>>()?,
            ),
            Node::Global(Global::Dtype(d)) => Value::Dtype(d.clone()),
            Node::Global(g) => return Err(format!("a bare global {g:?} in the data")),
            Node::Storage { .. } => return Err("a bare storage in the data".into()),
        })
    }
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
