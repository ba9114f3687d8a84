package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Doc is one file the check reads: a Markdown page, or a YAML file of
// examples/ (then its whole text is one yaml block).
type Doc struct {
	// Path is relative to the repository's root, as problems name it.
	Path  string
	Lines []string
}

// Span is a piece of text that the rules read: an inline code span, one
// command line of a shell block, or a YAML block.
type Span struct {
	Line int
	Text string
	// Context is the whole source line, for the "reason" rule.
	Context string
	// ReasonColumn is set for the first cell of a table headed "reason".
	ReasonColumn bool
}

// Block is a fenced code block.
type Block struct {
	// Line is the line of the block's first content line.
	Line int
	Lang string
	Text string
}

// Parsed is what the rules read of one Doc.
type Parsed struct {
	Code   []Span
	Shell  []Span
	Blocks []Block
}

var fence = regexp.MustCompile("^\\s*(```+|~~~+)\\s*([A-Za-z0-9_+-]*)")

// Parse splits a Markdown page into inline code spans, shell command lines
// and fenced blocks.
func Parse(d Doc) Parsed {
	var p Parsed
	var prose []int // line indexes outside fences
	for i := 0; i < len(d.Lines); i++ {
		m := fence.FindStringSubmatch(d.Lines[i])
		if m == nil {
			prose = append(prose, i)
			continue
		}
		start := i + 1
		j := start
		for ; j < len(d.Lines); j++ {
			if strings.HasPrefix(strings.TrimSpace(d.Lines[j]), m[1][:3]) {
				break
			}
		}
		b := Block{Line: start + 1, Lang: strings.ToLower(m[2]), Text: strings.Join(d.Lines[start:min(j, len(d.Lines))], "\n")}
		p.Blocks = append(p.Blocks, b)
		if isShell(b.Lang) {
			p.Shell = append(p.Shell, shellLines(b)...)
		}
		i = j
	}
	p.Code = codeSpans(d, prose)
	return p
}

func isShell(lang string) bool {
	switch lang {
	case "sh", "bash", "shell", "console", "zsh":
		return true
	}
	return false
}

// shellLines joins continued lines, drops prompts and comments, and splits
// command lists, so that each Span is one command.
func shellLines(b Block) []Span {
	var out []Span
	lines := strings.Split(b.Text, "\n")
	for i := 0; i < len(lines); i++ {
		line, n := lines[i], i
		for strings.HasSuffix(strings.TrimRight(line, " "), "\\") && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(strings.TrimRight(line, " "), "\\") + " " + lines[i]
		}
		line = strings.TrimPrefix(strings.TrimSpace(line), "$ ")
		if k := strings.Index(line, " #"); k >= 0 {
			line = line[:k]
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, cmd := range regexp.MustCompile(`&&|\|\||[|;]`).Split(line, -1) {
			if cmd = strings.TrimSpace(cmd); cmd != "" {
				out = append(out, Span{Line: b.Line + n, Text: cmd, Context: lines[n]})
			}
		}
	}
	return out
}

var backticks = regexp.MustCompile("`+")

// codeSpans finds the inline code spans of the prose lines; a span may
// continue on the next line, as Markdown allows.
func codeSpans(d Doc, prose []int) []Span {
	var out []Span
	var header []string // the current table's header cells
	for k := 0; k < len(prose); k++ {
		i := prose[k]
		line := d.Lines[i]
		header = tableHeader(d.Lines, i, header)
		// The first cell's bytes, in a table row.
		c0, c1 := -1, -1
		if len(header) > 0 && strings.Contains(strings.ToLower(header[0]), "reason") {
			if c0 = strings.Index(line, "|"); c0 >= 0 {
				c1 = c0 + 1 + strings.Index(line[c0+1:], "|")
			}
		}
		text := line
		// A span left open at the end of the line continues on the next.
		if len(backticks.FindAllString(stripEscaped(line), -1))%2 == 1 && k+1 < len(prose) && prose[k+1] == i+1 {
			text = line + " " + d.Lines[i+1]
			k++
		}
		locs := backticks.FindAllStringIndex(text, -1)
		for a := 0; a+1 < len(locs); a++ {
			open := text[locs[a][0]:locs[a][1]]
			for b := a + 1; b < len(locs); b++ {
				if text[locs[b][0]:locs[b][1]] != open {
					continue
				}
				body := strings.TrimSpace(text[locs[a][1]:locs[b][0]])
				out = append(out, Span{Line: lineNo(i, len(line), locs[a][0]), Text: strings.Join(strings.Fields(body), " "), Context: text,
					ReasonColumn: c0 >= 0 && locs[a][0] > c0 && locs[a][0] < c1})
				a = b
				break
			}
		}
	}
	return out
}

// lineNo is the 1-based line of byte at in a line (index i, length n)
// joined with the next.
func lineNo(i, n, at int) int {
	if at > n {
		return i + 2
	}
	return i + 1
}

func stripEscaped(s string) string { return strings.ReplaceAll(s, "\\`", "") }

// tableHeader returns the header cells of the table line i belongs to.
func tableHeader(lines []string, i int, prev []string) []string {
	t := strings.TrimSpace(lines[i])
	if !strings.HasPrefix(t, "|") {
		return nil
	}
	if i+1 < len(lines) && regexp.MustCompile(`^\|[\s:|-]+\|?$`).MatchString(strings.TrimSpace(lines[i+1])) {
		var cells []string
		for _, c := range strings.Split(strings.Trim(t, "|"), "|") {
			cells = append(cells, strings.TrimSpace(c))
		}
		return cells
	}
	return prev
}

// Load reads README.md, docs/*.md and examples/ (its Markdown and YAML
// files, charts' templates left out) below root.
func Load(root string) ([]Doc, error) {
	var paths []string
	paths = append(paths, "README.md")
	md, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, p := range md {
		rel, _ := filepath.Rel(root, p)
		paths = append(paths, rel)
	}
	err := filepath.WalkDir(filepath.Join(root, "examples"), func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && e.Name() == "templates" {
			return filepath.SkipDir
		}
		if ext := filepath.Ext(p); !e.IsDir() && (ext == ".md" || ext == ".yaml" || ext == ".yml") {
			rel, _ := filepath.Rel(root, p)
			paths = append(paths, rel)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(paths[1:])
	docs := make([]Doc, 0, len(paths))
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return nil, err
		}
		docs = append(docs, Doc{Path: filepath.ToSlash(p), Lines: strings.Split(string(b), "\n")})
	}
	return docs, nil
}

// IsYAMLFile says whether d is a YAML file rather than a Markdown page.
func (d Doc) IsYAMLFile() bool {
	return strings.HasSuffix(d.Path, ".yaml") || strings.HasSuffix(d.Path, ".yml")
}
