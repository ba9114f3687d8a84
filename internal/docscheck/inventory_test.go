package docscheck

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// The binaries' flag tests run at once under `make flags`: one rewriting
// its inventory while another reads them all must never read a part of it
// (an empty list made the docs check report every flag of that binary as
// unknown).
func TestInventoryRewrittenWhileReadIsReadWhole(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, InventoryDir), 0o755); err != nil {
		t.Fatal(err)
	}
	flags := []string{"config", "h", "help", "kubeconfig", "metrics-bind-address", "webhook-secret-file"}
	if err := WriteInventory(root, "petri-x", flags); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 2000 {
			if err := WriteInventory(root, "petri-x", flags); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for range 2000 {
		inv, err := ReadInventory(root)
		if err != nil {
			t.Fatal(err)
		}
		if len(inv["petri-x"]) != len(flags) || len(inv) != 1 {
			t.Fatalf("read %d inventories, petri-x with %d flags, while it was rewritten; want 1 with %d", len(inv), len(inv["petri-x"]), len(flags))
		}
	}
	wg.Wait()
}
