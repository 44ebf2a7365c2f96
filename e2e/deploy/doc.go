// Package deploy holds no code: its test checks the deployment files (each
// service's Dockerfile, docker-compose.yml and deploy/k8s) against the
// services themselves, without Docker or a cluster. It builds every service
// the way its Dockerfile does, from the copied directories alone, and asks
// the binary which variables it reads (-print-env-table).
package deploy
