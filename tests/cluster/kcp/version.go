package main

import (
	"fmt"

	"k8s.io/component-base/version"
)

func runVersion() int {
	fmt.Println(version.Get().String())
	return 0
}
