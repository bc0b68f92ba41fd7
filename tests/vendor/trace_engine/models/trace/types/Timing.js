// Copyright 2022 The Chromium Authors
// Use of this source code is governed by a BSD-style license that can be
// found in the LICENSE file.
// eslint-disable-next-line @typescript-eslint/naming-convention
export function Micro(value) {
    return value;
}
// eslint-disable-next-line @typescript-eslint/naming-convention
export function Milli(value) {
    return value;
}
// eslint-disable-next-line @typescript-eslint/naming-convention
export function Seconds(value) {
    return value;
}
//# sourceMappingURL=Timing.js.map