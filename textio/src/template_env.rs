//! A MiniJinja environment that renders chat templates the way transformers'
//! `_compile_jinja_template` does with Jinja2: `trim_blocks`,
//! `lstrip_blocks`, loop controls, no autoescape, Python string methods, the
//! globals `raise_exception` and `strftime_now`, transformers' `tojson`, and
//! Python's printing of `None`, booleans, floats and containers.

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{from_args, Rest, Value, ValueKind, ValueOrKwargs};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, State};

use super::py_format::py_str;
use super::py_json::{dumps, JsonOptions};
use super::TokenizerError;

/// Name under which the template is registered in its environment.
pub(crate) const TEMPLATE_NAME: &str = "chat_template";

/// The message of a template's `raise_exception(msg)`, carried as the source
/// of the MiniJinja error so the caller can tell it from other failures.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct RaisedException(pub String);

/// `raise_exception(message)`: aborts rendering with `message`.
fn raise_exception(message: Value) -> Result<Value, Error> {
    let message = py_str(&message).unwrap_or_else(|| message.to_string());
    Err(Error::new(ErrorKind::InvalidOperation, message.clone())
        .with_source(RaisedException(message)))
}

/// `strftime_now(format)`: Python's `datetime.now().strftime(format)`, local
/// time without a zone (as Python's naive `datetime.now()`).
fn strftime_now(format: &str) -> Result<Value, Error> {
    let now = jiff::Zoned::now().datetime();
    jiff::fmt::strtime::format(format, now)
        .map(Value::from)
        .map_err(|e| {
            Error::new(
                ErrorKind::InvalidOperation,
                format!("strftime_now({format:?}): {e}"),
            )
        })
}

/// transformers' `tojson` filter (see [`super::py_json`]).
fn tojson(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    // `Rest<ValueOrKwargs>` (unlike `&[Value]`) also takes the keyword map.
    let opts = JsonOptions::from_filter_args(&args.into_values())?;
    dumps(value, &opts).map(Value::from)
}

/// Jinja2's `string` filter: Python's `str()`.
fn string(value: &Value) -> Value {
    match value.kind() {
        ValueKind::String => value.clone(),
        _ => Value::from(py_str(value).unwrap_or_else(|| value.to_string())),
    }
}

/// Python's `str.title()`: a cased character is upper-cased after an
/// uncased one (so `"what's"` gives `"What'S"`, `"1st"` gives `"1St"`), and
/// lower-cased after a cased one. MiniJinja's pycompat only starts words
/// after whitespace.
fn py_title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut previous_cased = false;
    for c in s.chars() {
        let cased = c.is_uppercase() || c.is_lowercase();
        if cased && previous_cased {
            out.extend(c.to_lowercase());
        } else if cased {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        previous_cased = cased;
    }
    out
}

/// Python methods on values: pycompat's, with `str.title` fixed.
fn python_methods(
    state: &mut State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let (Some(s), "title") = (value.as_str(), method) {
        let () = from_args(args)?;
        return Ok(Value::from(py_title(s)));
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// Builds the environment and compiles `source` into it.
pub(crate) fn environment(source: String) -> Result<Environment<'static>, TokenizerError> {
    let mut env = Environment::new();
    let syntax = SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
        .map_err(|e| TokenizerError::TemplateSyntax(e.to_string()))?;
    env.set_syntax(syntax);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_unknown_method_callback(python_methods);
    env.set_formatter(|out, state, value| match py_str(value) {
        Some(s) => out.write_str(&s).map_err(Error::from),
        None => minijinja::escape_formatter(out, state, value),
    });
    env.add_filter("tojson", tojson);
    env.add_filter("string", string);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_template_owned(TEMPLATE_NAME, source)
        .map_err(|e| TokenizerError::TemplateSyntax(e.to_string()))?;
    Ok(env)
}

/// Classifies a render failure: a template's own `raise_exception` versus
/// anything else.
pub(crate) fn render_error(err: Error) -> TokenizerError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    while let Some(e) = source {
        if let Some(raised) = e.downcast_ref::<RaisedException>() {
            return TokenizerError::TemplateRaised(raised.0.clone());
        }
        source = e.source();
    }
    TokenizerError::TemplateRender(err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(source: &str, ctx: Value) -> Result<String, TokenizerError> {
        let env = environment(source.to_string())?;
        let tmpl = env.get_template(TEMPLATE_NAME).map_err(render_error)?;
        tmpl.render(ctx).map_err(render_error)
    }

    #[test]
    fn whitespace_control_matches_trim_and_lstrip_blocks() {
        let src = "<s>\n  {% for m in messages %}\n    {% if m %}[{{ m }}]{% endif %}\n  {% endfor %}\nend\n";
        // Jinja2 with trim_blocks + lstrip_blocks renders "<s>\n[a][b]end".
        let out = render(src, minijinja::context! { messages => vec!["a", "b"] }).unwrap();
        assert_eq!(out, "<s>\n[a][b]end");
    }

    #[test]
    fn python_values_print_like_python() {
        let out = render(
            "{{ none }}|{{ true }}|{{ 1e16 }}|{{ 0.5 }}|{{ [1, 'a', none] }}|{{ none|string }}|{{ {'k': false} }}",
            minijinja::context! { none => () },
        )
        .unwrap();
        assert_eq!(out, "None|True|1e+16|0.5|[1, 'a', None]|None|{'k': False}");
    }

    #[test]
    fn python_string_methods_and_loop_controls_work() {
        let src = "{% for w in s.split(' ') %}{% if w.startswith('x') %}{% continue %}{% endif %}\
                   {% if loop.index > 3 %}{% break %}{% endif %}{{ w.strip('.').upper() }};{% endfor %}";
        let out = render(src, minijinja::context! { s => "a. xb c. d e" }).unwrap();
        assert_eq!(out, "A;C;");
    }

    #[test]
    fn str_title_follows_python() {
        // Python: "what's up-to 1st ÉTÉ".title() == "What'S Up-To 1St Été"
        assert_eq!(py_title("what's up-to 1st ÉTÉ"), "What'S Up-To 1St Été");
        let out = render(
            "{{ s.title() }}",
            minijinja::context! { s => "hELLO wORLD" },
        )
        .unwrap();
        assert_eq!(out, "Hello World");
    }

    #[test]
    fn raise_exception_carries_its_message() {
        let err = render(
            "{{ raise_exception('Conversation roles must alternate') }}",
            Value::UNDEFINED,
        )
        .unwrap_err();
        assert_eq!(err.error_type(), "template_raised");
        assert!(
            matches!(&err, TokenizerError::TemplateRaised(m) if m == "Conversation roles must alternate"),
            "{err}"
        );
    }

    #[test]
    fn other_failures_are_render_or_syntax_errors() {
        let err = render("{{ x.nosuchmethod() }}", minijinja::context! { x => "s" }).unwrap_err();
        assert_eq!(err.error_type(), "template_render");
        let err = render("{% if %}", Value::UNDEFINED).unwrap_err();
        assert_eq!(err.error_type(), "template_syntax");
    }

    #[test]
    fn strftime_now_formats_the_current_date() {
        let out = render("{{ strftime_now('%Y-%m-%d') }}", Value::UNDEFINED).unwrap();
        let today = jiff::Zoned::now().date().to_string();
        assert_eq!(out, today);
        let err = render("{{ strftime_now('%Q') }}", Value::UNDEFINED).unwrap_err();
        assert_eq!(err.error_type(), "template_render");
    }

    #[test]
    fn tojson_filter_uses_python_layout() {
        let out = render(
            "{{ x | tojson }}|{{ x | tojson(indent=1) }}",
            minijinja::context! { x => vec![1, 2] },
        )
        .unwrap();
        assert_eq!(out, "[1, 2]|[\n 1,\n 2\n]");
    }
}
