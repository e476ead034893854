// Command gen records what Kubernetes' own Go functions return for seeded, generated pods and
// nodes, for tests/test_kubernetes_helpers.py to compare kpe's helpers with. See ../README.md.
//
//	go run ./gen > cases.json
package main

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	k8sv1 "k8s.io/kubernetes/pkg/apis/core/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"
)

const seed = 27

var r = rand.New(rand.NewSource(seed))

func pick[T any](xs []T) T { return xs[r.Intn(len(xs))] }

var cpus = []string{"1n", "1u", "1m", "100m", "250m", "1500m", "0.3", "1", "2", "3.5", "1001n"}
var mems = []string{"1", "1.5", "1000m", "100Mi", "0.3Gi", "0.7Gi", "0.9Gi", "1Gi", "1G", "1.1Ki", "512Mi", "123456789n"}
var gpus = []string{"1", "2", "0.5", "1500m"}

func resources(rl v1.ResourceList, names ...string) {
	for _, n := range names {
		if r.Intn(2) == 0 {
			continue
		}
		switch n {
		case "cpu":
			rl[v1.ResourceCPU] = resource.MustParse(pick(cpus))
		case "memory":
			rl[v1.ResourceMemory] = resource.MustParse(pick(mems))
		default:
			rl[v1.ResourceName(n)] = resource.MustParse(pick(gpus))
		}
	}
}

func container(name string) v1.Container {
	c := v1.Container{Name: name, Image: "x"}
	c.Resources.Requests = v1.ResourceList{}
	c.Resources.Limits = v1.ResourceList{}
	resources(c.Resources.Requests, "cpu", "memory")
	resources(c.Resources.Limits, "cpu", "memory", "nvidia.com/gpu")
	for n, q := range c.Resources.Limits { // valid pods: a request is at most its limit
		if req, ok := c.Resources.Requests[n]; ok && req.Cmp(q) > 0 {
			c.Resources.Limits[n] = req.DeepCopy()
		}
	}
	return c
}

var labelKeys = []string{"zone", "team", "gpu", "kubernetes.io/arch", "pool"}
var labelValues = []string{"a", "b", "c", "4", "8", "amd64"}

func genPod(i int, node string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: "ns", UID: types.UID(fmt.Sprint("u", i))}}
	p.Spec.NodeName = node
	for j := 0; j <= r.Intn(3); j++ {
		p.Spec.Containers = append(p.Spec.Containers, container(fmt.Sprintf("c%d", j)))
	}
	for j := 0; j < r.Intn(3); j++ {
		c := container(fmt.Sprintf("i%d", j))
		if r.Intn(2) == 0 {
			always := v1.ContainerRestartPolicyAlways
			c.RestartPolicy = &always
		}
		p.Spec.InitContainers = append(p.Spec.InitContainers, c)
	}
	if r.Intn(4) == 0 {
		p.Spec.Overhead = v1.ResourceList{}
		resources(p.Spec.Overhead, "cpu", "memory")
	}
	if r.Intn(3) == 0 {
		p.Spec.NodeSelector = map[string]string{pick(labelKeys): pick(labelValues)}
	}
	if r.Intn(2) == 0 {
		var terms []v1.NodeSelectorTerm
		for t := 0; t <= r.Intn(2); t++ {
			var term v1.NodeSelectorTerm
			for e := 0; e <= r.Intn(2); e++ {
				op := pick([]v1.NodeSelectorOperator{"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
				req := v1.NodeSelectorRequirement{Key: pick(labelKeys), Operator: op}
				switch op {
				case "In", "NotIn":
					req.Values = []string{pick(labelValues), pick(labelValues)}
				case "Gt", "Lt":
					req.Values = []string{pick([]string{"3", "5", "7"})}
				}
				term.MatchExpressions = append(term.MatchExpressions, req)
			}
			if r.Intn(3) == 0 {
				term.MatchFields = []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: pick([]v1.NodeSelectorOperator{"In", "NotIn"}), Values: []string{fmt.Sprintf("n%d", r.Intn(4))}}}
			}
			terms = append(terms, term)
		}
		p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{NodeSelectorTerms: terms}}}
	}
	for t := 0; t < r.Intn(3); t++ {
		tol := v1.Toleration{Key: pick([]string{"", "gpu", "dedicated"}), Operator: pick([]v1.TolerationOperator{"Exists", "Equal", ""}), Effect: pick([]v1.TaintEffect{"", "NoSchedule", "NoExecute"})}
		if tol.Operator != "Exists" {
			if tol.Key == "" {
				tol.Key = "gpu"
			}
			tol.Value = pick([]string{"", "a", "b"})
		}
		p.Spec.Tolerations = append(p.Spec.Tolerations, tol)
	}
	k8sv1.SetObjectDefaults_Pod(p) // what the API server stores: limits as requests, rounding to milli-units
	return p
}

func genNode(i int) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i), Labels: map[string]string{}}}
	for _, k := range labelKeys {
		if r.Intn(2) == 0 {
			n.Labels[k] = pick(labelValues)
		}
	}
	n.Status.Allocatable = v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse(pick([]string{"1", "2", "4", "3500m"})),
		v1.ResourceMemory: resource.MustParse(pick([]string{"1Gi", "2Gi", "1.5Gi", "4G"})),
	}
	if r.Intn(4) != 0 {
		n.Status.Allocatable[v1.ResourcePods] = resource.MustParse(pick([]string{"1", "2", "110"}))
	}
	if r.Intn(2) == 0 {
		n.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse(pick([]string{"1", "2", "8"}))
	}
	for t := 0; t < r.Intn(3); t++ {
		n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: pick([]string{"gpu", "dedicated"}), Value: pick([]string{"", "a", "b"}), Effect: pick([]v1.TaintEffect{"NoSchedule", "NoExecute", "PreferNoSchedule"})})
	}
	k8sv1.SetObjectDefaults_Node(n)
	return n
}

func strs(rl v1.ResourceList) map[string]string {
	out := map[string]string{}
	for n, q := range rl {
		out[string(n)] = q.String()
	}
	return out
}

type nodeCase struct {
	Node        *v1.Node          `json:"node"`
	Pods        []*v1.Pod         `json:"pods"`
	Requested   map[string]int64  `json:"requested"` // NodeInfo.Requested: MilliCPU, Memory, scalar resources
	Pod         *v1.Pod           `json:"pod"`
	Fits        []string          `json:"fits"` // noderesources.Fits reasons
	Affinity    bool              `json:"affinity"`
	Untolerated *string           `json:"untolerated"` // first untolerated NoSchedule/NoExecute taint key
}

func main() {
	logger := klog.Background()
	out := map[string]any{"kubernetes": "v1.37.2", "seed": seed}
	var requests []map[string]any
	for i := 0; i < 300; i++ {
		p := genPod(i, "")
		requests = append(requests, map[string]any{"pod": p, "requests": strs(resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}))})
	}
	out["podRequests"] = requests
	var nodes []nodeCase
	for i := 0; i < 300; i++ {
		node := genNode(r.Intn(4))
		var pods []*v1.Pod
		for j := 0; j < r.Intn(3); j++ {
			pods = append(pods, genPod(1000+10*i+j, node.Name))
		}
		ni := framework.NewNodeInfo(pods...)
		ni.SetNode(node)
		req := map[string]int64{"cpu": ni.Requested.MilliCPU, "memory": ni.Requested.Memory}
		for n, v := range ni.Requested.ScalarResources {
			req[string(n)] = v
		}
		pod := genPod(5000+i, "")
		var reasons []string
		for _, ins := range noderesources.Fits(pod, ni, nil, noderesources.ResourceRequestsOptions{EnablePodLevelResources: true}) {
			reasons = append(reasons, ins.Reason)
		}
		sort.Strings(reasons)
		match, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
		c := nodeCase{Node: node, Pods: pods, Requested: req, Pod: pod, Fits: reasons, Affinity: match}
		if taint, found := corev1helpers.FindMatchingUntoleratedTaint(logger, node.Spec.Taints, pod.Spec.Tolerations, func(t *v1.Taint) bool {
			return t.Effect == v1.TaintEffectNoSchedule || t.Effect == v1.TaintEffectNoExecute
		}, false); found {
			c.Untolerated = &taint.Key
		}
		nodes = append(nodes, c)
	}
	out["nodes"] = nodes
	var selectors []map[string]any
	keys := []string{"team", "team name", "a/b/c", "example.com/x", "Example.com/x", "-x", "x-", "", "kubernetes.io/arch"}
	values := []string{"a", "", "not valid!", "-a", "a_b.c", "x y"}
	for _, k := range keys {
		for _, v := range values {
			for _, op := range []metav1.LabelSelectorOperator{"In", "Exists", "Near"} {
				sel := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: k, Operator: op, Values: []string{v}}}}
				if op == "Exists" {
					sel.MatchExpressions[0].Values = nil
					sel.MatchLabels = map[string]string{k: v}
				}
				errs := metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, field.NewPath("podSelector"))
				selectors = append(selectors, map[string]any{"selector": sel, "valid": len(errs) == 0})
			}
		}
	}
	out["labelSelectors"] = selectors
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		panic(err)
	}
}
