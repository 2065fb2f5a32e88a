//! Text made safe inside HTML (element content and quoted attributes), for the HTML report and its charts.

pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}
