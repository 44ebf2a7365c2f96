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

func TestNodeGrowthCountsNodesArraysAndStructuresPerJob(t *testing.T) {
	const before = `1:
   1:        100       1000  [B (java.base@17.0.8)
   2:         10        720  org.apache.zookeeper.data.StatPersisted
   3:         10        400  org.apache.zookeeper.server.DataNode
Total        120       2120
`
	const after = `1:
   1:        260       9000  [B (java.base@17.0.8)
   2:         50       3600  org.apache.zookeeper.data.StatPersisted
   3:         50       2000  org.apache.zookeeper.server.DataNode
Total        360      14600
`
	b, err := parseHistogram(before)
	if err != nil {
		t.Fatal(err)
	}
	a, err := parseHistogram(after)
	if err != nil {
		t.Fatal(err)
	}
	nodes, arrays, structures := NodeGrowth(b, a, 5)
	if nodes != 8 || arrays != 1600 || structures != 896 {
		t.Fatalf("NodeGrowth = %v nodes, %v bytes of arrays, %v of structures; want 8, 1600, 896", nodes, arrays, structures)
	}
}
