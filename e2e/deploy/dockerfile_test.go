package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	Line  int      // where it starts
	Cmd   string   // upper case: FROM, COPY, RUN, ...
	Flags []string // leading --flags, e.g. --from=build
	Args  string   // the rest, as written
}

// stage is one FROM and the instructions under it.
type stage struct {
	From, Name string
	Steps      []instruction
}

// dockerfile is a parsed Dockerfile: the subset of the syntax the ingestq
// images use (no parser directives other than syntax, no heredocs).
type dockerfile struct {
	Path   string
	Stages []*stage
}

// knownInstruction reports whether the parser understands cmd; any other
// is an error, so that the checks never skip what they cannot read.
func knownInstruction(cmd string) bool {
	switch cmd {
	case "FROM", "COPY", "RUN", "WORKDIR", "USER", "ENV", "EXPOSE", "HEALTHCHECK", "ENTRYPOINT", "LABEL", "ARG":
		return true
	}
	return false
}

func parseDockerfile(file string) (*dockerfile, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	df := &dockerfile{Path: file}
	var (
		pending   strings.Builder
		startLine int
	)
	flush := func() error {
		text := strings.TrimSpace(pending.String())
		pending.Reset()
		if text == "" {
			return nil
		}
		cmd, rest, _ := strings.Cut(text, " ")
		in := instruction{Line: startLine, Cmd: strings.ToUpper(cmd)}
		if !knownInstruction(in.Cmd) {
			return fmt.Errorf("%s:%d: instruction %s is not understood by this test", file, startLine, in.Cmd)
		}
		rest = strings.TrimSpace(rest)
		for strings.HasPrefix(rest, "--") {
			flag, after, _ := strings.Cut(rest, " ")
			in.Flags = append(in.Flags, flag)
			rest = strings.TrimSpace(after)
		}
		in.Args = rest
		if in.Cmd == "FROM" {
			from, name, _ := strings.Cut(rest, " ")
			name = strings.TrimSpace(name)
			if as, ok := strings.CutPrefix(strings.ToUpper(name), "AS "); ok {
				name = strings.ToLower(strings.TrimSpace(as))
			}
			df.Stages = append(df.Stages, &stage{From: from, Name: name})
			return nil
		}
		if len(df.Stages) == 0 {
			return fmt.Errorf("%s:%d: %s before FROM", file, startLine, in.Cmd)
		}
		st := df.Stages[len(df.Stages)-1]
		st.Steps = append(st.Steps, in)
		return nil
	}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue // comments, also between continuation lines
		}
		if pending.Len() == 0 {
			if trimmed == "" {
				continue
			}
			startLine = n
		}
		if body, ok := strings.CutSuffix(trimmed, `\`); ok {
			pending.WriteString(body + " ")
			continue
		}
		pending.WriteString(trimmed)
		if err := flush(); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if pending.Len() > 0 {
		return nil, fmt.Errorf("%s: ends inside a continued line", file)
	}
	return df, flush()
}

// stageNamed returns the stage called name.
func (df *dockerfile) stageNamed(name string) *stage {
	for _, st := range df.Stages {
		if st.Name == name {
			return st
		}
	}
	return nil
}

// final is the stage that becomes the image.
func (df *dockerfile) final() *stage { return df.Stages[len(df.Stages)-1] }

// steps returns a stage's instructions of one kind.
func (st *stage) steps(cmd string) []instruction {
	var out []instruction
	for _, in := range st.Steps {
		if in.Cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// flag returns the value of --name=value, or "".
func (in instruction) flag(name string) string {
	for _, f := range in.Flags {
		if v, ok := strings.CutPrefix(f, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// execForm decodes a JSON-array argument (ENTRYPOINT, HEALTHCHECK CMD).
func execForm(args string) ([]string, error) {
	var argv []string
	if err := json.Unmarshal([]byte(args), &argv); err != nil {
		return nil, fmt.Errorf("%q is not in exec form (a JSON array): %w", args, err)
	}
	return argv, nil
}

// env returns the variables a stage's ENV instructions set (key=value
// pairs, unquoted: the form the ingestq images use).
func (st *stage) env() (map[string]string, error) {
	env := map[string]string{}
	for _, in := range st.steps("ENV") {
		for pair := range strings.FieldsSeq(in.Args) {
			k, v, ok := strings.Cut(pair, "=")
			if !ok || strings.ContainsAny(v, `"'$`) {
				return nil, fmt.Errorf("line %d: ENV %q: want unquoted key=value pairs", in.Line, in.Args)
			}
			env[k] = v
		}
	}
	return env, nil
}

// copyStep is a COPY of the build context into a stage, with the
// destination resolved against the WORKDIR in force.
type copyStep struct {
	Line    int
	Sources []string // relative to the build context
	Dest    string   // absolute path in the stage
	// DestIsDir: the destination names a directory (ends in /, or several
	// sources), into which a file source keeps its name.
	DestIsDir bool
}

// contextCopies lists a stage's COPY instructions that read the build
// context (not another stage).
func (st *stage) contextCopies() ([]copyStep, error) {
	var out []copyStep
	workdir := "/"
	for _, in := range st.Steps {
		switch in.Cmd {
		case "WORKDIR":
			workdir = resolve(workdir, in.Args)
		case "COPY":
			if in.flag("from") != "" {
				continue
			}
			fields := strings.Fields(in.Args)
			if len(fields) < 2 || strings.HasPrefix(in.Args, "[") {
				return nil, fmt.Errorf("line %d: COPY %q: want sources and a destination", in.Line, in.Args)
			}
			dest := fields[len(fields)-1]
			out = append(out, copyStep{
				Line:      in.Line,
				Sources:   fields[:len(fields)-1],
				Dest:      resolve(workdir, dest),
				DestIsDir: strings.HasSuffix(dest, "/") || len(fields) > 2,
			})
		}
	}
	return out, nil
}

// workdir is the WORKDIR in force at the end of a stage.
func (st *stage) workdir() string {
	dir := "/"
	for _, in := range st.steps("WORKDIR") {
		dir = resolve(dir, in.Args)
	}
	return dir
}

func resolve(base, p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(base, p)
}

// dockerignore is the exclusion list of a .dockerignore file: patterns are
// relative to the context root, * and ? within one path segment, a leading
// **/ for any depth. Exceptions (!pattern) are not used and refused.
type dockerignore []string

func readDockerignore(file string) (dockerignore, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var patterns dockerignore
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			return nil, fmt.Errorf("%s: exception %q is not understood by this test", file, line)
		}
		patterns = append(patterns, strings.TrimSuffix(path.Clean(strings.TrimPrefix(line, "/")), "/"))
	}
	return patterns, nil
}

// excludes reports whether rel (slash-separated, relative to the context)
// or a directory above it is excluded.
func (ig dockerignore) excludes(rel string) bool {
	parts := strings.Split(rel, "/")
	for i := 1; i <= len(parts); i++ {
		prefix := strings.Join(parts[:i], "/")
		for _, p := range ig {
			if matchIgnore(p, prefix) {
				return true
			}
		}
	}
	return false
}

func matchIgnore(pattern, rel string) bool {
	if rest, ok := strings.CutPrefix(pattern, "**/"); ok {
		parts := strings.Split(rel, "/")
		for i := range parts {
			if ok, _ := path.Match(rest, strings.Join(parts[i:], "/")); ok {
				return true
			}
		}
		return false
	}
	ok, _ := path.Match(pattern, rel)
	return ok
}

// stage copies what a build stage's COPY instructions take from the
// context at repo, less what .dockerignore excludes, into root, which
// stands for the stage's file system root.
func stageContext(repo string, ignore dockerignore, copies []copyStep, root string) error {
	for _, c := range copies {
		for _, src := range c.Sources {
			rel := path.Clean(src)
			if rel == ".." || strings.HasPrefix(rel, "../") || path.IsAbs(rel) {
				return fmt.Errorf("line %d: COPY source %s is outside the build context", c.Line, src)
			}
			from := filepath.Join(repo, filepath.FromSlash(rel))
			info, err := os.Stat(from)
			if err != nil {
				return fmt.Errorf("line %d: COPY %s: %w", c.Line, src, err)
			}
			to := filepath.Join(root, filepath.FromSlash(c.Dest))
			if !info.IsDir() {
				if c.DestIsDir {
					to = filepath.Join(to, filepath.Base(from))
				}
				if err := copyFile(from, to); err != nil {
					return err
				}
				continue
			}
			err = filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				r, err := filepath.Rel(repo, p)
				if err != nil {
					return err
				}
				if ignore.excludes(filepath.ToSlash(r)) {
					if d.IsDir() {
						return filepath.SkipDir
					}
					return nil
				}
				if d.IsDir() || !d.Type().IsRegular() {
					return nil
				}
				under, err := filepath.Rel(from, p)
				if err != nil {
					return err
				}
				return copyFile(p, filepath.Join(to, under))
			})
			if err != nil {
				return fmt.Errorf("line %d: COPY %s: %w", c.Line, src, err)
			}
		}
	}
	return nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}
