package serving

import (
	"testing"

	"github.com/ingestq/ingestq/shared/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
