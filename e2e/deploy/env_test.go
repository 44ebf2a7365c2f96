package deploy

import (
	"os"
	"testing"

	"github.com/ingestq/ingestq/shared/testenv"
)

func TestMain(m *testing.M) {
	testenv.Isolate()
	os.Exit(m.Run())
}
