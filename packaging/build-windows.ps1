# Build dist\Personal LLM-<version>.msi with Briefcase (run on Windows x64; needs internet for Briefcase's
# templates, the Python support package and WiX, and for PyPI).
#
#   powershell -ExecutionPolicy Bypass -File packaging\build-windows.ps1 [-Venv PATH] [-Python python3.11]
#
# The build venv (build\briefcase-venv by default) holds only Briefcase and Pillow; Briefcase installs the
# app's requirements into the app itself, torch from the CPU index (requirement_installer_args).
param([string]$Venv = "", [string]$Python = "python")
$ErrorActionPreference = "Stop"
$Root = (Resolve-Path "$PSScriptRoot\..").Path
if (-not $Venv) { $Venv = "$Root\build\briefcase-venv" }
function Run { param([string]$Exe, [string[]]$Arguments)
  & $Exe @Arguments
  if ($LASTEXITCODE -ne 0) { throw "$Exe $($Arguments -join ' ') failed with exit code $LASTEXITCODE" }
}
if (-not (Test-Path "$Venv\Scripts\python.exe")) { Run $Python @("-m", "venv", $Venv) }
$Py = "$Venv\Scripts\python.exe"
Run $Py @("-m", "pip", "install", "-q", "--upgrade", "pip")
Run $Py @("-m", "pip", "install", "-q", "briefcase==0.4.7", "pillow")
$Stage = "$Root\build\briefcase"
Run $Py @("$Root\packaging\briefcase_stage.py", "--out", $Stage, "--check")
Push-Location $Stage
try {
  Run "$Venv\Scripts\briefcase.exe" @("create", "windows", "app", "--no-input")
  Run "$Venv\Scripts\briefcase.exe" @("build", "windows", "app", "--no-input")
  # the built app must pass its own self-test before it is packaged (GUI exe: the report goes to the exit code)
  $Exe = Get-ChildItem -Path "$Stage\build" -Recurse -Filter "Personal LLM.exe" | Select-Object -First 1
  $env:QT_QPA_PLATFORM = "offscreen"
  $p = Start-Process -FilePath $Exe.FullName -ArgumentList "--self-test" -Wait -PassThru -NoNewWindow
  if ($p.ExitCode -ne 0) { throw "self-test of the built app failed (exit code $($p.ExitCode))" }
  Remove-Item Env:QT_QPA_PLATFORM
  Run "$Venv\Scripts\briefcase.exe" @("package", "windows", "app", "--no-input")
} finally { Pop-Location }
New-Item -ItemType Directory -Force -Path "$Root\dist" | Out-Null
Copy-Item "$Stage\dist\*.msi" "$Root\dist\" -Verbose
