// Package deploy holds no code: its test checks the deployment files (the
// Dockerfile, docker-compose.yml and deploy/k8s) against the services
// themselves, without Docker or a cluster. It builds every service the way
// the Dockerfile does, from the copied directories alone, asks the binary
// which variables it reads (-print-env-table), and renders deploy/k8s with
// kustomize (make deps installs it into bin/).
package deploy
