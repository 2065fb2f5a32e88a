"""A terminal screen as tmux captures it with its escape sequences (`capture-pane -e -p`) turned into an HTML
page that looks like the terminal: colours (the 16 standard ones, the 256-colour palette, 24-bit), bold, dim,
italic, underline and reverse. scripts/gen-pictures renders that page in headless Chromium for the guide.

Usage: ansi_html.py COLUMNS < screen.txt > screen.html
"""
import html
import re
import sys

# xterm's default 16 colours.
BASE = ["#000000", "#cd0000", "#00cd00", "#cdcd00", "#0000ee", "#cd00cd", "#00cdcd", "#e5e5e5",
        "#7f7f7f", "#ff0000", "#00ff00", "#ffff00", "#5c5cff", "#ff00ff", "#00ffff", "#ffffff"]
FG, BG = "#d0d0d0", "#1c1c1c"


def palette(n):
    if n < 16:
        return BASE[n]
    if n < 232:
        n -= 16
        level = [0, 95, 135, 175, 215, 255]
        return "#%02x%02x%02x" % (level[n // 36], level[n // 6 % 6], level[n % 6])
    grey = 8 + 10 * (n - 232)
    return "#%02x%02x%02x" % (grey, grey, grey)


def apply(codes, st):
    i = 0
    while i < len(codes):
        c = codes[i]
        if c == 0:
            st.clear()
        elif c in (1, 2, 3, 4, 7):
            st[c] = True
        elif c in (22, 23, 24, 27):
            for k in {22: (1, 2), 23: (3,), 24: (4,), 27: (7,)}[c]:
                st.pop(k, None)
        elif 30 <= c <= 37 or 90 <= c <= 97:
            st["fg"] = BASE[c - 30 if c < 90 else c - 82]
        elif 40 <= c <= 47 or 100 <= c <= 107:
            st["bg"] = BASE[c - 40 if c < 100 else c - 92]
        elif c in (39, 49):
            st.pop("fg" if c == 39 else "bg", None)
        elif c in (38, 48) and i + 1 < len(codes):
            key = "fg" if c == 38 else "bg"
            if codes[i + 1] == 5 and i + 2 < len(codes):
                st[key] = palette(codes[i + 2])
                i += 2
            elif codes[i + 1] == 2 and i + 4 < len(codes):
                st[key] = "#%02x%02x%02x" % tuple(codes[i + 2:i + 5])
                i += 4
        i += 1


def style(st):
    fg, bg = st.get("fg", FG), st.get("bg", BG)
    if st.get(7):
        fg, bg = bg, fg
    css = [f"color:{fg}", f"background:{bg}"]
    if st.get(1):
        css.append("font-weight:bold")
    if st.get(2):
        css.append("opacity:0.7")
    if st.get(3):
        css.append("font-style:italic")
    if st.get(4):
        css.append("text-decoration:underline")
    return ";".join(css)


def main():
    columns = int(sys.argv[1])
    out, st = [], {}
    for line in sys.stdin.read().split("\n"):
        row, shown = [], 0
        for part in re.split(r"(\x1b\[[0-9;]*m)", line):
            if part.startswith("\x1b["):
                apply([int(x) if x else 0 for x in part[2:-1].split(";")], st)
            elif part:
                shown += len(part)
                row.append(f'<span style="{style(st)}">{html.escape(part)}</span>')
        # tmux leaves out a line's trailing blank cells, which hold no attributes: the rest is the default.
        row.append(" " * max(columns - shown, 0))
        out.append("".join(row))
    print(f"""<!doctype html><meta charset="utf-8"><style>
body {{ margin: 0; background: {BG}; }}
pre {{ margin: 0; padding: 10px; font: 14px/18px "DejaVu Sans Mono", monospace; color: {FG}; }}
</style><pre>{chr(10).join(out)}</pre>""")


main()
