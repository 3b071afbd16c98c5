//! `${NAME}` and `${NAME:-fallback}` in path values, so one file can point
//! at `$TOKENROUTER_CACHE` wherever the cache lives.

/// Replaces every `${NAME}` / `${NAME:-fallback}` in `text` using `lookup`.
/// An empty variable counts as unset (as in the shell's `:-`). Text without
/// `${` is returned unchanged; a lone `$` is kept literally.
pub(crate) fn expand_env(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unterminated `${{` in `{text}`"))?;
        let body = &after[..end];
        let (name, fallback) = match body.split_once(":-") {
            Some((name, fallback)) => (name, Some(fallback)),
            None => (body, None),
        };
        let valid = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        if !valid {
            return Err(format!(
                "`${{{body}}}` is not a variable reference (use ${{NAME}} or ${{NAME:-fallback}})"
            ));
        }
        match (lookup(name).filter(|v| !v.is_empty()), fallback) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(fallback)) => out.push_str(fallback),
            (None, None) => return Err(format!("environment variable {name} is not set")),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "CACHE" => Some("/c".to_string()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expands_set_unset_and_fallbacks() {
        assert_eq!(expand_env("a/b", &env).unwrap(), "a/b");
        assert_eq!(
            expand_env("${CACHE}/models/x", &env).unwrap(),
            "/c/models/x"
        );
        assert_eq!(expand_env("${CACHE:-../.cache}/m", &env).unwrap(), "/c/m");
        assert_eq!(
            expand_env("${NOPE:-../.cache}/m", &env).unwrap(),
            "../.cache/m"
        );
        assert_eq!(expand_env("${EMPTY:-d}/m", &env).unwrap(), "d/m");
        assert_eq!(
            expand_env("$HOME/${CACHE}${CACHE}", &env).unwrap(),
            "$HOME//c/c"
        );
    }

    #[test]
    fn rejects_unset_and_malformed() {
        assert_eq!(
            expand_env("${NOPE}/m", &env).unwrap_err(),
            "environment variable NOPE is not set"
        );
        assert!(expand_env("${CACHE", &env)
            .unwrap_err()
            .contains("unterminated"));
        assert!(expand_env("${}", &env)
            .unwrap_err()
            .contains("not a variable reference"));
        assert!(expand_env("${A B}", &env)
            .unwrap_err()
            .contains("not a variable reference"));
        assert!(expand_env("${1X}", &env)
            .unwrap_err()
            .contains("not a variable reference"));
    }
}
