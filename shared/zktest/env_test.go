package zktest

import (
	"context"
	"testing"
)

// JVM options in the machine's environment (_JAVA_OPTIONS overrides the
// command line) do not reach the server: with a heap too small to start,
// it still serves.
func TestTheServerRunsWithoutTheMachinesJVMOptions(t *testing.T) {
	if err := Available(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS"} {
		t.Setenv(name, "-Xmx3m -XX:MaxMetaspaceSize=8m")
	}
	srv, err := Start(context.Background(), t.TempDir(), Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
}
