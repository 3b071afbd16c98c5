//! SVG charts (plotters) for the results pages: lines against concurrency,
//! and labelled points for cost/quality trade-offs.

use std::path::Path;

use plotters::prelude::*;

/// One named series of (x, y) points.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// Points in drawing order.
    pub points: Vec<(f64, f64)>,
}

/// How a chart draws its series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Lines through the points, with markers.
    Lines,
    /// Markers only.
    Points,
}

/// Why a chart could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("plot {path}: {message}")]
pub struct PlotError {
    path: String,
    message: String,
}

fn range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.08).max(hi.abs() * 0.02).max(1e-9);
    // Non-negative data starts at 0 so bars of different runs compare by eye.
    (if lo >= 0.0 { 0.0 } else { lo - pad }, hi + pad)
}

/// Draws `series` into an SVG file at `path`.
pub fn chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    style: Style,
) -> Result<(), PlotError> {
    let err = |e: &dyn std::fmt::Display| PlotError {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| err(&e))?;
    }
    let all = || series.iter().flat_map(|s| s.points.iter());
    let (x0, x1) = range(all().map(|p| p.0));
    let (y0, y1) = range(all().map(|p| p.1));
    let root = SVGBackend::new(path, (720, 440)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut ch = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| err(&e))?;
    ch.configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(|e| err(&e))?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts = s.points.clone();
        if style == Style::Lines {
            ch.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(|e| err(&e))?;
        }
        ch.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(|e| err(&e))?
            .label(s.name.clone())
            .legend(move |(x, y)| Circle::new((x + 8, y), 4, color.filled()));
    }
    ch.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_an_svg_with_every_series() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plots/t.svg");
        let series = vec![
            Series {
                name: "async_delayed".into(),
                points: vec![(1.0, 63.0), (8.0, 399.0)],
            },
            Series {
                name: "lockstep".into(),
                points: vec![(1.0, 60.0), (8.0, 230.0)],
            },
        ];
        chart(&path, "tok/s", "N", "tok/s", &series, Style::Lines).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("async_delayed") && svg.contains("lockstep"));
        // A chart with no points still renders (empty axes), not a panic.
        chart(&path, "empty", "x", "y", &[], Style::Points).unwrap();
    }
}
