// Package queue is the contract of ingestq's ZooKeeper queue, with no I/O:
// every path, node format and state transition of docs/queue-contract.md
// ("the spec" in this package's comments), which the Merritt queue library
// (mrt-zk) and Merritt's programs read and write too. Nodes are written with
// the keys and types the library reads; every form either side writes is
// read; keys ingestq does not know are carried forward.
//
// Every rule about states lives in state.go. The packages under this one
// read and write the tree by role, each owning its writes: session (one
// ZooKeeper session: its requests, grouped, retried and fenced, and the
// locking core of every claim), jobs (what a stage does: consumers, claims,
// object locks, ids, workers), batches (what the batcher does) and admin
// (what operators do).
//
// # What ingestq writes where the spec leaves it open
//
// The contract says what is written where it is otherwise open:
//
//   - Priorities above 99. A job's state entry is "%02d-jid…", so priority
//     150 is written with all its digits ("150-jid0000000042"), as the
//     Merritt library's own format writes it; ingestq's readers compare the
//     numbers, not the names, so such entries still sort after 99
//     (entryName, parseEntry, compareEntries). ingestq's own writers keep
//     priorities within 0–99 (MaxPriority).
//
//   - A batch's status-report past what a node holds. The node is
//     {"last_modified","failed_jobs":[jid…],"successful_jobs":[jid…]}; a jid
//     costs ~16 bytes, so past ~57,000 jobs the lists cannot both be kept
//     whole in MaxNodeBytes (900 KiB; the server refuses a request over
//     jute.maxbuffer, 1 MiB by default). ingestq then keeps failed_jobs whole
//     if it fits (an update report works from it), keeps as much of
//     successful_jobs as fits, from its first jid (the batcher lists jids in
//     order), and writes beside each trimmed
//     list how many jobs it had: "successful_jobs_total": N, and
//     "failed_jobs_total": N if failed_jobs had to be trimmed too (then
//     successful_jobs is empty). These keys appear only when a list was
//     trimmed: a report that fits is written exactly as the Merritt library
//     writes it, and peers ignore keys they do not know. Reading, a report
//     without them (a peer's, or one of ours that fit) has totals equal to
//     its lists' lengths, and a key that is not a count is ignored. The whole
//     lists are always the batch's states/batch-completed and
//     states/batch-failed references (jobs.Reader.BatchJobIDs). See FitStatusReport,
//     ReportTotals, batches.Client.CompletedAfterReport.
//
//   - A job's file list past MaxInlineFileListBytes. The manifest node
//     then holds {"files":[],"kept":{"name","sha256","bytes","files"}}: the
//     list, in the node's own form, is the file of that name in the job's
//     working folder (the estimator writes it, workdir.KeepFileList), and
//     its readers check its size, digest and count (workdir.FileList).
//     Nothing per file of a large object is kept in ZooKeeper.
//
//   - A batch's spawning. While its jobs are being created a Processing
//     batch has a "spawning" node holding /jobs's child version (decimal)
//     as it was before any job id was reserved for the batch; a batcher that
//     finds it unlocked finishes the batch. Job ids are reserved as job
//     nodes holding "<bid> <mark>" (EncodeJobReservation), each job written
//     into its node later: the end of the spawning removes the nodes
//     holding the batch's bid that have no child, numbered from that
//     version, which a batcher stopped in between left
//     (batches.BatchClaim.FinishSpawning). A batch whose payload is a fetched document
//     (object manifest, manifest of manifests or of containers) also gets,
//     with its move to Processing and so before any job exists, a "payload"
//     node: {"sha256":"<hex>","size":N}, the digest and length of the one
//     reading of the payload its jobs are made from (the batcher keeps that
//     reading in the batch's folder of the work root). Each job's
//     configuration.batch_entry is its row in that reading, which is how a
//     batcher finishing a half-spawned batch knows which rows have a job.
//     When the rest of a half-spawned batch cannot be made from that reading
//     (the copy is lost and the payload changed), the node gains
//     "spawn_stopped": "<why>", no other job is created, and the batch is
//     reported Failed once its jobs end. Peers ignore both nodes; the
//     batch's deletion removes them with the rest. See PayloadRecord,
//     batches.BatchChange.Payload, BatchClaim.StopSpawning and SpawnedEntries.
package queue
