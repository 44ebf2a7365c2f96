package bench

import "testing"

func TestHistogramTotalReadsTheBytesOfTheTotalLine(t *testing.T) {
	const histogram = `1234:
 num     #instances         #bytes  class name (module)
-------------------------------------------------------
   1:        150000       12000000  [B (java.base@17.0.8)
   2:         50000        1200000  org.apache.zookeeper.server.DataNode
Total        200000       13200000
`
	got, err := histogramTotal(histogram)
	if err != nil || got != 13200000 {
		t.Fatalf("histogramTotal = %d, %v; want 13200000", got, err)
	}
	if _, err := histogramTotal("1234:\nno such process\n"); err == nil {
		t.Fatal("histogramTotal of an answer without a Total line: no error")
	}
}
