//! The pickle virtual machine: opcodes, the memo and the few globals it
//! accepts, building [`Value`]s without executing anything.

use std::collections::HashMap;

use super::{StorageDtype, TensorRef, Value};

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

pub(super) struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    nodes: Vec<Node>,
    stack: Vec<Item>,
    memo: HashMap<u32, usize>,
}

impl<'a> Machine<'a> {
    /// A machine at the start of `data`.
    pub(super) fn new(data: &'a [u8]) -> Self {
        Machine {
            data,
            pos: 0,
            nodes: Vec::new(),
            stack: Vec::new(),
            memo: HashMap::new(),
        }
    }

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

    /// Runs to STOP; the root node.
    pub(super) fn run(&mut self) -> Result<usize, String> {
        loop {
            let at = self.pos;
            let op = self.u8()?;
            if op == b'.' {
                return self.pop();
            }
            if !(self.op_scalar(op)?
                || self.op_container(op)?
                || self.op_memo(op)?
                || self.op_object(op)?)
            {
                return Err(format!(
                    "refuses opcode 0x{op:02x} at byte {at} (not something torch.save writes)"
                ));
            }
        }
    }

    /// Protocol, frame and scalar opcodes (None, bools, ints, floats, strings). `Ok(false)`: not one of these.
    fn op_scalar(&mut self, op: u8) -> Result<bool, String> {
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
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Marks, empty containers, tuples and the appends and set-items that fill lists and dicts. `Ok(false)`: not one of these.
    fn op_container(&mut self, op: u8) -> Result<bool, String> {
        match op {
            b'(' => self.stack.push(Item::Mark),
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
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The memo: PUT, BINPUT, LONG_BINPUT, MEMOIZE and the GETs. `Ok(false)`: not one of these.
    fn op_memo(&mut self, op: u8) -> Result<bool, String> {
        match op {
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
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Globals, persistent ids (tensor storages), REDUCE and BUILD. `Ok(false)`: not one of these.
    fn op_object(&mut self, op: u8) -> Result<bool, String> {
        match op {
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
            _ => return Ok(false),
        }
        Ok(true)
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

    /// The finished value of `node` (nesting bounded by [`MAX_DEPTH`]).
    pub(super) fn value(&self, node: usize, depth: usize) -> Result<Value, String> {
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
