package inventory

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// openHelperEnv makes the test binary a process that opens the inventory
// it names and exits: a recorder replica starting, as far as SQLite's
// locks can tell.
const openHelperEnv = "INGESTQ_INVENTORY_OPEN_HELPER"

func TestMain(m *testing.M) {
	if path := os.Getenv(openHelperEnv); path != "" {
		db, err := Open(context.Background(), path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		db.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestReplicasOpeningANewInventoryAtOnceAllOpenIt: recorder replicas that
// start together open the same new file at the same moment (the schema
// made, WAL mode set), each a process of its own; none may fail with
// SQLITE_BUSY.
func TestReplicasOpeningANewInventoryAtOnceAllOpenIt(t *testing.T) {
	for round := range 50 {
		path := filepath.Join(t.TempDir(), "inventory.db")
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), openHelperEnv+"="+path)
				if out, err := cmd.CombinedOutput(); err != nil {
					errs[i] = fmt.Errorf("%w: %s", err, out)
				}
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, replica %d: %v", round, i, err)
			}
		}
	}
}
