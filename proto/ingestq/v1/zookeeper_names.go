package ingestqv1

// ZooKeeperRefuses reports whether ZooKeeper refuses r in a node name, so
// that a request field that becomes one (a batch uuid under /batch-uuids/,
// a collection under /locks/collections/) is refused before anything is
// written, not by ZooKeeper in the middle of a write. ZooKeeper's path
// check (PathUtils.validatePath) refuses U+0000–U+001F, U+007F–U+009F,
// U+D800–U+F8FF and U+FFF0–U+FFFF in Java's UTF-16, where every character
// above U+FFFF is a pair of surrogates (U+D800–U+DFFF): refused too. The
// queue library applies the same rule.
func ZooKeeperRefuses(r rune) bool {
	switch {
	case r <= 0x1f, r >= 0x7f && r <= 0x9f:
		return true
	case r >= 0xd800 && r <= 0xf8ff:
		return true
	case r >= 0xfff0:
		return true
	}
	return false
}
