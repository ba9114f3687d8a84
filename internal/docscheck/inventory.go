package docscheck

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// InventoryDir holds one file per binary listing its flags, one a line,
// as the binary's own test read them from its real FlagSets. The docs test
// reads them; each binary's test keeps its file true.
const InventoryDir = "internal/docscheck/flags"

// UpdateEnv, set to 1, makes a binary's flag test rewrite its inventory.
const UpdateEnv = "PETRI_UPDATE_FLAGS"

// HelpEnv tells a test binary that it runs as a helper process: it sets
// os.Args to the binary's name and the words of HelpEnv and calls main.
const HelpEnv = "PETRI_FLAGS_HELP"

// ReadInventory reads every binary's flags.
func ReadInventory(root string) (map[string]map[string]bool, error) {
	files, err := filepath.Glob(filepath.Join(root, InventoryDir, "*.txt"))
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		set := map[string]bool{}
		for _, l := range strings.Fields(string(b)) {
			set[l] = true
		}
		out[strings.TrimSuffix(filepath.Base(f), ".txt")] = set
	}
	return out, nil
}

// WriteInventory replaces binary's inventory with flags, one a line. The
// binaries' tests run at once, each reading every inventory while one may
// be rewriting its own, so the file is replaced whole (written beside it,
// then renamed): a reader sees the old list or the new one, never a part.
func WriteInventory(root, binary string, flags []string) error {
	dir := filepath.Join(root, InventoryDir)
	tmp, err := os.CreateTemp(dir, "."+binary+"-*.new")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.WriteString(strings.Join(flags, "\n") + "\n"); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, binary+".txt"))
}

var usageFlag = regexp.MustCompile(`(?m)^\s+-([A-Za-z0-9][A-Za-z0-9._-]*)`)

// UsageFlags reads the flag names out of the usage text of Go's flag
// package (what -help prints), leaving out the testing package's own.
func UsageFlags(usage string) []string {
	var out []string
	for _, m := range usageFlag.FindAllStringSubmatch(usage, -1) {
		if !strings.HasPrefix(m[1], "test.") && !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// HelpFlags runs the test binary again as a helper process (the test
// named testName, with HelpEnv set to args) and reads the flags from what
// it prints. The helper calls the binary's main with args, which prints
// its real FlagSet's usage and exits.
func HelpFlags(t testing.TB, testName string, args ...string) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+testName+"$")
	cmd.Env = append(os.Environ(), HelpEnv+"="+strings.Join(args, " "))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run() // -help exits 0 or 2 depending on the FlagSet
	flags := UsageFlags(out.String())
	if len(flags) == 0 {
		t.Fatalf("%v printed no flags:\n%s", args, out.String())
	}
	return flags
}

// HelperArgs returns the words of HelpEnv, and whether this test binary
// runs as the helper process.
func HelperArgs() ([]string, bool) {
	v, ok := os.LookupEnv(HelpEnv)
	return strings.Fields(v), ok
}

// CheckFlags keeps a binary's inventory true and the docs honest about its
// flags: it fails when the flags read from its real FlagSets differ from
// its inventory (PETRI_UPDATE_FLAGS=1 rewrites it), and names every line of
// the docs that names a flag no binary has once this binary's real flags
// replace its inventory, so renaming a flag fails here, at once.
func CheckFlags(t testing.TB, binary string, flags []string) {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// Go's flag package and cobra take -h and -help of every FlagSet.
	flags = append(flags, "h", "help")
	sort.Strings(flags)
	flags = slices.Compact(flags)
	if os.Getenv(UpdateEnv) == "1" {
		if err := WriteInventory(root, binary, flags); err != nil {
			t.Fatal(err)
		}
	}
	inv, err := ReadInventory(root)
	if err != nil {
		t.Fatal(err)
	}
	real := map[string]bool{}
	for _, f := range flags {
		real[f] = true
	}
	var gone, added []string
	for f := range inv[binary] {
		if !real[f] {
			gone = append(gone, "-"+f)
		}
	}
	for _, f := range flags {
		if !inv[binary][f] {
			added = append(added, "-"+f)
		}
	}
	sort.Strings(gone)
	sort.Strings(added)
	inv[binary] = real
	docs, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range Check(docs, &Known{Flags: inv}) {
		if p.Kind == KindFlag {
			t.Errorf("%s", p)
		}
	}
	if len(gone)+len(added) > 0 {
		t.Errorf("%s's flags differ from %s (gone: %v, new: %v): once the docs name its flags as they are, run make flags",
			binary, filepath.Join(InventoryDir, binary+".txt"), gone, added)
	}
}

// CommandsFile lists kubectl petri's subcommands, kept true by the plugin's
// test as the flag inventories are.
const CommandsFile = InventoryDir + "/kubectl-petri.commands"

// ReadCommands reads kubectl petri's subcommands.
func ReadCommands(root string) (map[string]bool, error) {
	b, err := os.ReadFile(filepath.Join(root, CommandsFile))
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, l := range strings.Fields(string(b)) {
		out[l] = true
	}
	return out, nil
}

// CheckCommands is CheckFlags for kubectl petri's subcommands.
func CheckCommands(t testing.TB, cmds []string) {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(cmds)
	want := strings.Join(cmds, "\n") + "\n"
	file := filepath.Join(root, CommandsFile)
	if os.Getenv(UpdateEnv) == "1" {
		if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if b, _ := os.ReadFile(file); string(b) != want {
		t.Errorf("kubectl petri's commands %v differ from %s: once the docs name them as they are, run make flags", cmds, CommandsFile)
	}
	real := map[string]bool{}
	for _, c := range cmds {
		real[c] = true
	}
	docs, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range Check(docs, &Known{PluginCommands: real}) {
		if p.Kind == KindCommand {
			t.Errorf("%s", p)
		}
	}
}
