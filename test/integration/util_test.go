package integration

import "os"

var osReadFile = os.ReadFile
