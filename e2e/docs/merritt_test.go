package docs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ingestq/ingestq/shared/zktest"
)

// zkCliDir is where Debian's zookeeper package (make deps) keeps zkCli.sh.
const zkCliDir = "/usr/share/zookeeper/bin"

// TestTheSwitchOversDrainCheckShowsWhatIsLive runs the commands
// docs/merritt.md gives to see whether Merritt's ingest service has
// drained, with ZooKeeper's own client against a real server: on a queue
// with a job in Downloading and a batch Processing it shows both; once the
// job has ended and the batch is reported it shows every live state empty
// and no batch, the Pending one waiting for ingestq left out.
func TestTheSwitchOversDrainCheckShowsWhatIsLive(t *testing.T) {
	if _, err := os.Stat(filepath.Join(zkCliDir, "zkCli.sh")); err != nil {
		t.Fatalf("zkCli.sh, which the page runs, is not in %s (make deps installs Debian's zookeeper package): %v", zkCliDir, err)
	}
	var script string
	for _, block := range fencedBlocks(docFiles(t)["docs/merritt.md"], "sh") {
		if strings.Contains(block, "zkCli.sh") {
			script = block
		}
	}
	if script == "" {
		t.Fatal("docs/merritt.md shows no zkCli.sh commands for the drain")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv, err := zktest.Start(ctx, t.TempDir(), zktest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	conn, _, err := zk.Connect([]string{srv.Addr}, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const root = "/merritt"
	put := func(path, data string) {
		t.Helper()
		parts := strings.Split(strings.TrimPrefix(root+path, "/"), "/")
		for i := range parts {
			p := "/" + strings.Join(parts[:i+1], "/")
			d := []byte(nil)
			if i == len(parts)-1 {
				d = []byte(data)
			}
			if _, err := conn.Create(p, d, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
				t.Fatalf("create %s: %v", p, err)
			} else if err == zk.ErrNodeExists && i == len(parts)-1 {
				if _, err := conn.Set(p, d, -1); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	status := func(s string) string {
		return `{"status":"` + s + `","last_modified":"2026-11-22 03:51:07 +0000","message":""}`
	}
	for _, s := range []string{"pending", "estimating", "provisioning", "downloading", "processing", "storing", "recording", "notify", "completed"} {
		put("/jobs/states/"+s, "")
	}
	put("/jobs/states/downloading/05-jid0000000001", "")
	put("/batches/bid0000000001/status", status("Processing"))
	put("/batches/bid0000000002/status", status("Pending"))
	put("/batches/bid0000000003/status", status("Completed"))

	run := func() string {
		t.Helper()
		var lines []string
		for _, line := range strings.Split(script, "\n") {
			switch {
			case strings.HasPrefix(line, "ZK="):
				line = "ZK=" + srv.Addr
			case strings.HasPrefix(line, "ROOT="):
				line = "ROOT=" + root
			}
			lines = append(lines, line)
		}
		cmd := exec.CommandContext(ctx, "bash", "-c", strings.Join(lines, "\n")) // as in a reader's interactive shell
		cmd.Env = append(os.Environ(), "PATH="+zkCliDir+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the page's commands: %v\n%s", err, out)
		}
		return string(out)
	}
	out := run()
	for _, want := range []string{"downloading: [05-jid0000000001]", "pending: []", "notify: []", `bid0000000001 {"status":"Processing"`} {
		if !strings.Contains(out, want) {
			t.Errorf("with a job live and a batch in Processing, the commands do not show %q:\n%s", want, out)
		}
	}
	for _, gone := range []string{"bid0000000002", "bid0000000003"} {
		if strings.Contains(out, gone) {
			t.Errorf("the commands show %s, which is Pending or ended:\n%s", gone, out)
		}
	}

	if err := conn.Delete(root+"/jobs/states/downloading/05-jid0000000001", -1); err != nil {
		t.Fatal(err)
	}
	put("/batches/bid0000000001/status", status("Completed"))
	out = run()
	if strings.Contains(out, "jid") || strings.Contains(out, "bid") || strings.Count(out, ": []") != 8 {
		t.Errorf("drained, the commands should show eight empty states and no batch:\n%s", out)
	}
}
