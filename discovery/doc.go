// Package discovery keeps registrations in step with the engine pods of a
// Kubernetes cluster.
//
// Registrations reads a pod's annotations (Prefix + model, type,
// block-size, events-port, replay-port, dp-size or dp-ranks, instance-id,
// tenant, lora, salt, hash-profile, hash-algorithm, python-hash-seed) into
// one registration per data-parallel rank, each validated as a POST
// /register body is (server.DecodeRegistration); the defaults are vLLM's and
// SGLang's own. Discovery watches the pods matching a label selector in some
// namespaces with client-go informers over a dynamic client and reconciles
// one pod at a time:
//
//   - a pod that is Ready, running and has an IP is registered as its
//     annotations say;
//   - a pod that stops being Ready, leaves the selector or is deleted is
//     unregistered;
//   - changed annotations or a new IP replace its registrations; a new UID
//     (the pod recreated under its name: an engine with an empty cache)
//     replaces them even when nothing else changed;
//   - a refused registration is logged, counted and retried at the next
//     resync; refused annotations register nothing until they change.
//
// Ready reports whether every namespace's first list has been reconciled.
// The package never writes state: the API server is the record of what it
// registered. Proved by TestRegistrations, TestRegistrationsRefused and
// TestDiscoveryFollowsPods (client-go's fake API server, package kubetest),
// and in cmd/conductor by TestKubernetesDiscovery and, against a real
// kube-apiserver, TestKubernetesDiscoveryAPIServer.
package discovery
