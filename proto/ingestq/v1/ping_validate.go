package ingestqv1

import "fmt"

// maxPingMessageBytes bounds an echoed message: Ping checks liveness and auth,
// it is not a data channel.
const maxPingMessageBytes = 1024

// Validate rejects a message longer than 1024 bytes. The shared server's
// validator interceptor calls it and answers InvalidArgument with this text.
func (r *PingRequest) Validate() error {
	return validatePingMessage(r.GetMessage())
}

// Validate rejects a message longer than 1024 bytes (see PingRequest.Validate).
func (r *AdminPingRequest) Validate() error {
	return validatePingMessage(r.GetMessage())
}

func validatePingMessage(m string) error {
	if len(m) > maxPingMessageBytes {
		return fmt.Errorf("message is %d bytes, at most %d allowed", len(m), maxPingMessageBytes)
	}
	return nil
}
