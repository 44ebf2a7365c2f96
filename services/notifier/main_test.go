package main

import (
	"testing"

	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

func TestMain(m *testing.M) { zktest.Main(m) }

func TestBinaryServesWhileConnectedAndStopsOnSIGTERM(t *testing.T) {
	servicetest.CheckBinary(t, "notifier")
}
