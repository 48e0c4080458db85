//! smoke's `matmul` check, run here for `burnin smoke` (which has no libtorch): a
//! product of two small integer matrices through libtorch, compared exactly with the
//! product burnin computes on the CPU (`burnin::smoke::reference_product`).
use burnin::smoke::{mat_a, mat_b, product_errors, reference_product, MATMUL_N};
use burnin::trainer::MatmulResult;
use tch::{Device, Kind, Tensor};

fn result(status: &str, detail: String) -> MatmulResult {
    MatmulResult {
        status: status.into(),
        detail,
    }
}

/// Run the check on `device` ("cpu" or "cuda:N").
pub fn check(device: &str) -> MatmulResult {
    let version = option_env!("BURNIN_LIBTORCH_VERSION").unwrap_or("?");
    let device = match device.strip_prefix("cuda:").map(str::parse::<usize>) {
        None if device == "cpu" => Device::Cpu,
        Some(Ok(g)) => {
            if tch::Cuda::device_count() == 0 {
                // The driver shows the GPU (burnin checked) but libtorch does not.
                return result(
                    "skip",
                    format!(
                        "libtorch {version} sees no CUDA device although the driver shows one: training \
                         cannot use this GPU (install the PyTorch wheel for this driver's CUDA)"
                    ),
                );
            }
            Device::Cuda(g)
        }
        _ => {
            return result(
                "fail",
                format!("--matmul-check {device}: not cpu or cuda:N"),
            )
        }
    };
    let n = MATMUL_N;
    let fill = |f: fn(usize, usize) -> i64| -> Vec<f32> {
        (0..n * n).map(|x| f(x / n, x % n) as f32).collect()
    };
    let (a, b) = (fill(mat_a), fill(mat_b));
    let run = || -> Result<Vec<f32>, tch::TchError> {
        let shape = [n as i64, n as i64];
        let ta = Tensor::f_from_slice(&a)?
            .f_reshape(shape)?
            .f_to_device(device)?;
        let tb = Tensor::f_from_slice(&b)?
            .f_reshape(shape)?
            .f_to_device(device)?;
        let c = ta
            .f_matmul(&tb)?
            .f_to_device(Device::Cpu)?
            .f_to_kind(Kind::Float)?
            .f_reshape([-1])?;
        Vec::<f32>::try_from(&c)
    };
    // tch panics on some errors instead of returning them: a panic is a FAIL too.
    let got = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => return result("fail", format!("libtorch on {device:?}: {e}")),
        Err(_) => return result("fail", format!("libtorch panicked on {device:?}")),
    };
    match product_errors(&got, &reference_product(n)) {
        (0, _) => result(
            "pass",
            format!(
                "{n}x{n} f32 product on {device:?} (libtorch {version}) equals the exact result"
            ),
        ),
        (w, first) => result(
            "fail",
            format!(
                "{n}x{n} f32 product on {device:?}: {w} wrong element(s), first at {}",
                first.unwrap_or(0)
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_product_on_the_cpu_is_exact_and_a_bad_device_is_a_failure() {
        let r = super::check("cpu");
        assert_eq!(r.status, "pass", "{r:?}");
        assert!(r.detail.contains("equals the exact result"), "{r:?}");
        assert_eq!(super::check("tpu:0").status, "fail");
    }
}
