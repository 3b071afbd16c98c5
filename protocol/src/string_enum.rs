//! `string_enum!`: a closed set of lowercase names as a Rust enum, with
//! `as_str`, `Display`, `FromStr` and serde impls that agree with each other.

/// A name that is not one of the accepted spellings of a setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{got}` (expected one of: {expected})")]
pub struct ParseEnumError {
    /// The setting being parsed, e.g. `backend`.
    pub what: &'static str,
    /// The text that did not match.
    pub got: String,
    /// The accepted spellings, comma separated.
    pub expected: String,
}

/// Declares a `Copy` enum whose variants each have one canonical name.
/// Deserializing goes through `FromStr`, so a bad value in YAML reports the
/// same message as a bad value on the command line.
#[macro_export]
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident as $what:literal {
            $( $(#[$vmeta:meta])* $variant:ident => $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The canonical name, as written in the YAML file.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::ParseEnumError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err($crate::ParseEnumError {
                        what: $what,
                        got: s.to_string(),
                        expected: [$($text),+].join(", "),
                    }),
                }
            }
        }

        impl<'de> $crate::__serde::Deserialize<'de> for $name {
            fn deserialize<D: $crate::__serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <String as $crate::__serde::Deserialize>::deserialize(d)?;
                text.parse().map_err($crate::__serde::de::Error::custom)
            }
        }

        impl $crate::__serde::Serialize for $name {
            fn serialize<S: $crate::__serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
    };
}
